"""RedisSink(mode="upsert") against a real redis-server and real Spark (local[2]), for hash
and string writes.

``sink(df, epoch)`` runs the whole protocol. Late tasks of an epoch the head passed are no-ops
here before any key is read (the apply script checks the head), so an older epoch reaches the
keys only after a deliberate head reset: a query restarted from an older checkpoint. That is
how these tests re-run one.
Writes are counted in the sink's AOF, where every command the apply script ran is logged in
order: each HSET/SET of a key and the epoch it wrote.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from pyspark.sql import DataFrame, SparkSession

from exactlyonce.connectors import ConfigError, RedisSink
from tests.support.redis_fixtures import SinkRedis

pytestmark = pytest.mark.integration

SCHEMA = "k STRING, n BIGINT, total BIGINT"
TOMB_SCHEMA = "k STRING, n BIGINT, total BIGINT, gone BOOLEAN"
SHARDS = 3
WRITES = ["hash", "string"]


def frame(spark: SparkSession, rows: list[tuple[Any, ...]], schema: str = SCHEMA) -> DataFrame:
    return spark.createDataFrame(rows, schema)


def new_sink(server: SinkRedis, name: str, write: str, **kw: Any) -> RedisSink:
    return RedisSink(
        server.url,
        f"{name}:{{k}}",
        ["k"],
        name,
        write=write,  # type: ignore[arg-type]
        mode="upsert",
        shards=SHARDS,
        **kw,
    )


def stored(server: SinkRedis, name: str, write: str) -> dict[str, tuple[int, int, int]]:
    """key -> (n, total, epoch) of every value key under ``name:``."""
    r = server.client()
    out = {}
    for raw in r.scan_iter(match=f"{name}:*"):
        key = raw.decode()
        if write == "hash":
            h = {k.decode(): v.decode() for k, v in r.hgetall(key).items()}
            out[key.split(":", 1)[1]] = (int(h["n"]), int(h["total"]), int(h["epoch"]))
        else:
            doc = json.loads(r.get(key))
            epoch = r.get(f"{stored_prefix(server, name)}:epoch:{key}")
            out[key.split(":", 1)[1]] = (int(doc["n"]), int(doc["total"]), int(epoch))
    return out


def stored_prefix(server: SinkRedis, name: str) -> str:
    return new_sink(server, name, "string", check=False).prefix


def epochs_written(server: SinkRedis, name: str, write: str) -> dict[str, list[int]]:
    """Per value key, the epoch of each write the AOF logged, in order."""
    out: dict[str, list[int]] = {}
    for cmd in server.aof_commands():
        op = cmd[0].upper()
        if write == "hash" and op == b"HSET" and cmd[1].startswith(f"{name}:".encode()):
            fields = dict(zip(cmd[2::2], cmd[3::2], strict=False))
            out.setdefault(cmd[1].decode(), []).append(int(fields[b"epoch"]))
        elif write == "string" and op == b"SET" and b":epoch:" in cmd[1]:
            key = cmd[1].decode().split(":epoch:", 1)[1]
            if key.startswith(f"{name}:"):
                out.setdefault(key, []).append(int(cmd[2]))
    return out


def went_back(history: dict[str, list[int]]) -> dict[str, list[int]]:
    return {k: e for k, e in history.items() if e != sorted(e)}


@pytest.mark.parametrize("write", WRITES)
def test_an_older_epoch_rerun_never_rolls_a_value_back(
    write: str, spark: SparkSession, sink_redis: SinkRedis, unique_name: str
) -> None:
    older = frame(spark, [(f"k{i}", 1, i) for i in range(40)])
    newer = frame(spark, [(f"k{i}", 2, 100 + i) for i in range(0, 40, 2)])
    sink = new_sink(sink_redis, unique_name, write, pipeline_size=8)  # staged chunks
    sink(older, 0)
    sink(newer, 1)
    assert sink.last_report is not None and sink.last_report.written == 20
    # Late tasks of epoch 0: the apply script sees the head past the epoch and writes nothing.
    rerun = sink._write_epoch(older, 0, SHARDS)
    assert sum(t.written + t.stale for t in rerun) == 0
    sink.reset_head()  # a query restarted from an older checkpoint: only the guard is left
    restarted = new_sink(sink_redis, unique_name, write)
    restarted(older, 0)
    assert restarted.last_report is not None and restarted.last_report.stale == 20
    expected = {f"k{i}": (2, 100 + i, 1) if i % 2 == 0 else (1, i, 0) for i in range(40)}
    assert stored(sink_redis, unique_name, write) == expected
    history = epochs_written(sink_redis, unique_name, write)
    assert not went_back(history)
    assert history[f"{unique_name}:k0"] == [0, 1], "the re-runs never wrote a newer key"
    assert history[f"{unique_name}:k1"] == [0, 0], "an untouched key: rewritten, same value"


@pytest.mark.parametrize("write", WRITES)
def test_a_replay_of_the_same_epoch_rewrites_the_same_values(
    write: str, spark: SparkSession, sink_redis: SinkRedis, unique_name: str
) -> None:
    df = frame(spark, [(f"k{i}", 1, i) for i in range(30)])
    sink = new_sink(sink_redis, unique_name, write, ttl_seconds=600)
    sink(df, 0)
    before = stored(sink_redis, unique_name, write)
    sink.reset_head()  # the head would skip the replay whole: let it reach the keys
    replay = new_sink(sink_redis, unique_name, write, ttl_seconds=600)
    replay(df, 0)
    assert replay.last_report is not None
    assert (replay.last_report.written, replay.last_report.stale) == (30, 0)
    assert stored(sink_redis, unique_name, write) == before
    history = epochs_written(sink_redis, unique_name, write)
    assert len(history) == 30 and all(e == [0, 0] for e in history.values())
    r = sink_redis.client()
    assert 0 < r.pttl(f"{unique_name}:k3") <= 600_000, "TTL applied"


@pytest.mark.parametrize("write", WRITES)
def test_tombstones_delete_under_the_same_guard(
    write: str, spark: SparkSession, sink_redis: SinkRedis, unique_name: str
) -> None:
    first = frame(spark, [("a", 1, 1, False), ("b", 1, 2, False), ("c", 1, 3, None)], TOMB_SCHEMA)
    second = frame(spark, [("b", 0, 0, True), ("c", 2, 30, False), ("x", 0, 0, True)], TOMB_SCHEMA)
    sink = new_sink(sink_redis, unique_name, write, tombstone_column="gone")
    sink(first, 0)
    sink(second, 1)
    report = sink.last_report
    assert report is not None and (report.written, report.deleted) == (1, 2)
    assert stored(sink_redis, unique_name, write) == {"a": (1, 1, 0), "c": (2, 30, 1)}
    again = first.union(frame(spark, [("x", 9, 9, False)], TOMB_SCHEMA))
    sink.reset_head()
    sink = new_sink(sink_redis, unique_name, write, tombstone_column="gone")
    sink(again, 0)  # b and x stay deleted, c stays at epoch 1
    assert sink.last_report is not None
    assert (sink.last_report.stale, sink.last_report.written) == (3, 1)
    assert stored(sink_redis, unique_name, write) == {"a": (1, 1, 0), "c": (2, 30, 1)}
    r = sink_redis.client()
    marker = "tomb" if write == "hash" else "epoch"
    assert r.get(f"{sink.prefix}:{marker}:{unique_name}:b") == b"1"
    assert r.get(f"{sink.prefix}:{marker}:{unique_name}:x") == b"1"
    sink(frame(spark, [("b", 3, 33, False)], TOMB_SCHEMA), 2)  # a newer epoch brings b back
    assert stored(sink_redis, unique_name, write)["b"] == (3, 33, 2)
    if write == "hash":
        assert r.get(f"{sink.prefix}:tomb:{unique_name}:b") is None
        assert b"gone" not in r.hgetall(f"{unique_name}:b")
    else:
        assert "gone" not in json.loads(r.get(f"{unique_name}:b"))
    assert not went_back(epochs_written(sink_redis, unique_name, write))


@pytest.mark.parametrize("write", WRITES)
def test_within_an_epoch_one_row_per_key_whatever_the_partition_order(
    write: str, spark: SparkSession, sink_redis: SinkRedis, unique_name: str
) -> None:
    rows = [("k1", 1, 10), ("k1", 2, 5), ("k1", 1, 7), ("k2", 4, 4), ("k2", 4, 4), ("k3", 1, 1)]
    sink = new_sink(sink_redis, unique_name, write)
    results = []
    for n, order in enumerate([rows, rows[::-1], rows[2:] + rows[:2]]):
        sink(frame(spark, order).repartition(3 - n % 2), n)
        assert sink.last_report is not None and sink.last_report.duplicates == 3
        results.append({k: v[:2] for k, v in stored(sink_redis, unique_name, write).items()})
    assert results[0] == results[1] == results[2] == {"k1": (2, 5), "k2": (4, 4), "k3": (1, 1)}


def test_upsert_refusals_name_the_field(sink_redis: SinkRedis) -> None:
    with pytest.raises(ConfigError) as stream:
        RedisSink(sink_redis.url, "s:{k}", ["k"], "q", write="stream", mode="upsert", check=False)
    assert stream.value.field == "write"
    with pytest.raises(ConfigError) as template:
        RedisSink(sink_redis.url, "s:{k}:{n}", ["k"], "q", mode="upsert", check=False)
    assert template.value.field == "key_template"


@pytest.mark.parametrize("write", WRITES)
def test_order_by_picks_the_row_of_a_key_within_an_epoch(
    write: str, spark: SparkSession, sink_redis: SinkRedis, unique_name: str
) -> None:
    """The greatest ``order_by`` wins, compared as Spark typed it (Redis stores text: 10 > 9
    here, though "10" < "9")."""
    rows = [("k1", 9, 100), ("k1", 10, 1), ("k2", 3, 6), ("k2", 3, 7)]
    sink = new_sink(sink_redis, unique_name, write, order_by=["n"])
    sink(frame(spark, rows[::-1]).repartition(2), 0)
    got = {k: v[:2] for k, v in stored(sink_redis, unique_name, write).items()}
    assert got == {"k1": (10, 1), "k2": (3, 7)}  # a tie: the canonical encoding decides
