"""RedisSink against a real redis-server and real Spark (local[2]), batch by batch.

The sink's Redis is its own server (tests/support/redis_fixtures.py), apart from the
catalog's. Writes are counted, not keys: hash and string writes through the sink's AOF (every
HSET/SET a script ran is in it), stream appends through the entries per record ID.
"""

from __future__ import annotations

import logging
from collections import Counter
from typing import Any

import pyarrow as pa
import pytest
from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StringType, StructField, StructType

from exactlyonce.connectors import ConfigError, ExactlyOnceError, SinkUnavailableError
from exactlyonce.connectors.base import ERROR_COLUMN, PAYLOAD_COLUMN, SHARD_COLUMN, TaskResult
from exactlyonce.connectors.redis import RedisShardTask, RedisSink
from exactlyonce.connectors.redis import task as task_module
from exactlyonce.dedup.catalog import namespace
from exactlyonce.dedup.ids import record_id
from exactlyonce.integration.spark import start_stream
from tests.support.events import events, ids
from tests.support.redis_fixtures import PASSWORD, SinkRedis

pytestmark = pytest.mark.integration


def new_sink(server: SinkRedis, name: str, write: str = "hash", **kw: Any) -> RedisSink:
    template = f"{name}:ev:{{action}}" if write == "stream" else f"{name}:{{event_id}}"
    return RedisSink(server.url, template, ["event_id"], query_name=name, write=write, **kw)  # type: ignore[arg-type]


def control_leftovers(server: SinkRedis, sink: RedisSink) -> list[str]:
    """Staging or shard markers left behind once the head passed their epochs."""
    r = server.client()
    keys = [k.decode() for k in r.scan_iter(match=f"{sink.prefix}:*")]
    return [k for k in keys if ":stage:" in k or ":done:" in k]


def test_hash_replays_are_skipped_and_each_record_is_written_once(
    spark: SparkSession, sink_redis: SinkRedis, unique_name: str
) -> None:
    first = events(spark, 0, 300)
    first = first.union(first.limit(60))  # 60 repeated inside the batch
    sink = new_sink(sink_redis, unique_name, ttl_seconds=600, pipeline_size=64)  # staged chunks
    sink(first, 0)
    assert sink.last_report is not None
    assert (sink.last_report.written, sink.last_report.duplicates) == (300, 60)
    sink(first, 0)  # Spark re-runs a batch after a crash before its commit log
    assert sink.last_report.skipped
    restarted = new_sink(sink_redis, unique_name, ttl_seconds=600)  # a new driver reads the head
    restarted(first, 0)
    assert restarted.last_report is not None and restarted.last_report.skipped
    restarted(events(spark, 250, 400), 1)  # 50 IDs seen in epoch 0
    report = restarted.last_report
    assert (report.written, report.duplicates) == (100, 50)

    writes = sink_redis.write_counts("HSET", f"{unique_name}:")
    assert len(writes) == 400 and set(writes.values()) == {1}, "every key written exactly once"
    r = sink_redis.client()
    assert r.hgetall(f"{unique_name}:e7") == {
        b"event_id": b"e7",
        b"amount": b"70",
        b"action": b"click",
    }
    assert 0 < r.pttl(f"{unique_name}:e399") <= 600_000, "TTL applied"
    head = restarted.head()
    assert head is not None and head.epoch == 1
    assert control_leftovers(sink_redis, sink) == []


def test_string_mode_writes_json_once_with_a_ttl(
    spark: SparkSession, sink_redis: SinkRedis, unique_name: str
) -> None:
    df = events(spark, 0, 120).withColumn(
        "note", F.when(F.col("amount") == 30, F.lit(None)).otherwise(F.lit('é " ,'))
    )
    df = df.union(df.limit(20))
    sink = new_sink(sink_redis, unique_name, write="string", ttl_seconds=90)
    sink(df, 0)
    sink(events(spark, 100, 150).withColumn("note", F.lit("x")), 1)
    r = sink_redis.client()
    assert (
        r.get(f"{unique_name}:e3") == b'{"event_id":"e3","amount":30,"action":"click","note":null}'
    )
    assert '"note":"é \\" ,"' in r.get(f"{unique_name}:e4").decode()
    assert 0 < r.pttl(f"{unique_name}:e149") <= 90_000
    writes = sink_redis.write_counts("SET", f"{unique_name}:")
    assert len(writes) == 150 and set(writes.values()) == {1}
    assert [rep.duplicates for rep in sink.reports] == [20, 20]


def test_stream_appends_once_through_reruns_and_a_lost_catalog(
    spark: SparkSession,
    sink_redis: SinkRedis,
    services: dict[str, str],
    unique_name: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    sink = new_sink(sink_redis, unique_name, write="stream", ttl_seconds=3600)
    sink(events(spark, 0, 400), 0)
    # The driver dies after the tasks of epoch 1 committed, before the head advanced.
    head = sink.head()
    assert head is not None
    sink._write_epoch(events(spark, 400, 800), 1, head.num_shards)
    assert sink.head() == head
    rerun = new_sink(sink_redis, unique_name, write="stream", ttl_seconds=3600)
    rerun(events(spark, 400, 800), 1)
    report = rerun.last_report
    assert report is not None and report.shards_skipped == head.num_shards
    assert report.written == 0

    # The catalog's Redis loses this query's catalog: an append-only sink must rebuild it
    # from its streams, or epoch 2's replays of epoch 0 would be appended again.
    import redis

    catalog = redis.Redis.from_url(services["EXACTLYONCE_REDIS_URL"])
    lost = list(catalog.scan_iter(match=f"{namespace(unique_name, sink.sink_name)}:*"))
    assert lost and catalog.delete(*lost) == len(lost)
    caplog.set_level(logging.INFO, logger="exactlyonce")
    rebuilt = new_sink(sink_redis, unique_name, write="stream", ttl_seconds=3600)
    rebuilt(events(spark, 0, 100).union(events(spark, 800, 900)), 2)
    report = rebuilt.last_report
    assert report is not None and (report.written, report.duplicates) == (100, 100)
    assert "catalog rebuilt from the sink: 800 IDs" in caplog.text

    r = sink_redis.client()
    stream = f"{unique_name}:ev:click"
    counts = Counter(f[b"record_id"].decode() for _, f in r.xrange(stream))
    assert set(counts.values()) == {1}, "no record appended twice"
    assert set(counts) == ids(0, 900)
    _, fields = r.xrange(stream, count=1)[0]
    assert fields[b"epoch"] == b"0" and fields[b"action"] == b"click"
    assert 0 < r.pttl(stream) <= 3_600_000
    assert control_leftovers(sink_redis, sink) == []


def test_null_keys_and_refused_records_go_to_dead_letters(
    spark: SparkSession, sink_redis: SinkRedis, unique_name: str
) -> None:
    df = events(spark, 0, 100).withColumn(
        "event_id", F.when(F.col("amount") == 70, None).otherwise(F.col("event_id"))
    )
    r = sink_redis.client()
    r.set(f"{unique_name}:e15", "not a hash")  # HSET on it fails: WRONGTYPE
    sink = new_sink(sink_redis, unique_name)
    sink(df, 0)
    report = sink.last_report
    assert report is not None and (report.written, report.dead_letters) == (98, 2)
    letters = [
        {k.decode(): v.decode() for k, v in f.items()} for _, f in r.xrange(sink.dead_letter_key)
    ]
    assert len(letters) == 2
    by_error = {d["error"].split(":")[0]: d for d in letters}
    assert by_error["null key column(s)"]["error"] == "null key column(s): event_id"
    assert '"amount":70' in by_error["null key column(s)"]["payload"]
    refused = by_error["redis"]
    assert refused["error"].startswith("redis: WRONGTYPE")
    assert refused["record_id"] == record_id(["e15"]) and refused["epoch"] == "0"
    assert '"amount":"150"' in refused["payload"]
    assert all(d["query"] == unique_name for d in letters)
    assert r.get(f"{unique_name}:e15") == b"not a hash"
    sink(df, 0)  # a replay does not dead-letter twice
    assert r.xlen(sink.dead_letter_key) == 2


def test_template_and_url_errors_name_the_problem_and_never_the_password(
    spark: SparkSession,
    sink_redis: SinkRedis,
    unique_name: str,
    tmp_path: Any,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG, logger="exactlyonce")
    caplog.set_level(logging.DEBUG, logger="redis")
    stream = spark.readStream.format("rate").load()  # columns: timestamp, value
    sink = RedisSink(sink_redis.url, "user:{user_id}", ["value"], unique_name)
    with pytest.raises(ConfigError, match=r"names column\(s\) \['user_id'\]") as err:
        start_stream(stream, sink, str(tmp_path / "ckpt"))
    assert err.value.field == "key_template"
    assert not spark.streams.active, "refused before the stream started"
    for template, why in [
        ("user:{}", "name columns"),
        ("user:{a.b}", "not an attribute"),
        ("user:{x", "not a str.format template"),
        ("static", "names no column"),
        ("user:{x:d}", "cannot format"),
    ]:
        with pytest.raises(ConfigError, match=why):
            RedisSink(sink_redis.url, template, ["value"], unique_name, check=False)
    with pytest.raises(ConfigError, match="id_field"):
        RedisSink(sink_redis.url, "{value}", ["value"], unique_name).preflight(
            StructType([StructField("value", StringType()), StructField("record_id", StringType())])
        )

    wrong = sink_redis.url.replace(PASSWORD, "wrong-secret")
    bad_urls = [
        (wrong, SinkUnavailableError, "wrong-secret"),
        ("redis://:secret@127.0.0.1:1/0", SinkUnavailableError, "secret"),
        ("http://:secret@127.0.0.1/0", ConfigError, "secret"),
        ("redis://:secret@127.0.0.1:notaport/0", ConfigError, "secret"),
    ]
    for url, error, password in bad_urls:
        with pytest.raises(error) as caught:
            RedisSink(url, "user:{value}", ["value"], unique_name, connect_timeout=3)
        text = f"{caught.value} {caught.value!r}"
        assert password not in text, text
        if error is SinkUnavailableError:
            assert "cannot reach Redis at redis://:***@127.0.0.1" in text

    # A whole batch, logged at DEBUG: the sink's password shows nowhere.
    ok = new_sink(sink_redis, unique_name)
    ok(events(spark, 0, 20), 0)
    shown = [caplog.text, repr(ok), ok.sink_name, str(ok.reports), str(vars(ok))]
    assert ok.last_report is not None and ok.last_report.written == 20
    assert not [s for s in shown if PASSWORD in s]
    assert "wrong-secret" not in caplog.text and ":secret@" not in caplog.text


TASK_COLUMNS = ["event_id", "record_id", "epoch"]


def batch(names: list[str], epoch: int) -> pa.RecordBatch:
    """One task's input: records of shard 0 of ``epoch``, no dead letters."""
    n = len(names)
    return pa.RecordBatch.from_pydict(
        {
            "event_id": names,
            "record_id": [record_id([x]) for x in names],
            "epoch": pa.array([epoch] * n, pa.int64()),
            SHARD_COLUMN: pa.array([0] * n, pa.int32()),
            ERROR_COLUMN: pa.array([None] * n, pa.string()),
            PAYLOAD_COLUMN: pa.array([None] * n, pa.string()),
        }
    )


def test_a_lost_reply_is_verified_and_lost_staging_writes_nothing(
    sink_redis: SinkRedis, unique_name: str
) -> None:
    """The executor side alone: re-sending the apply script, and staging that vanished."""
    sink = new_sink(sink_redis, unique_name, dedup=False, pipeline_size=2, shards=1)
    schema = StructType([StructField("event_id", StringType())])

    def write_epoch_0(epoch: int, shards: int) -> list[TaskResult]:
        task = RedisShardTask(sink._task_writer(epoch, TASK_COLUMNS).target, epoch)  # type: ignore[attr-defined]
        late = RedisShardTask(sink._task_writer(epoch, TASK_COLUMNS).target, epoch)  # type: ignore[attr-defined]
        task.write(batch(["a", "b", "c"], epoch))  # two chunks: one staged, one inline
        late.write(batch(["a", "b", "c"], epoch))  # a concurrent attempt of the same shard
        task.commit()
        assert task.status == 1 and task.staged == 1
        task._commit([0])  # the client lost the reply and sends the same call again
        assert task.status == 2, "the retry finds its own marker: verified, not rewritten"
        late.commit()
        assert late.status == 0 and late.result.skipped_shards == [0]
        assert late.result.written == 0
        task.close()
        late.close()
        return [task.result]

    sink.run_epoch(0, None, schema, lambda: 1, write_epoch_0)
    assert sink_redis.write_counts("HSET", f"{unique_name}:") == Counter(
        {f"{unique_name}:{x}": 1 for x in "abc"}
    )
    zombie = RedisShardTask(sink._task_writer(0, TASK_COLUMNS).target, 0)  # type: ignore[attr-defined]
    zombie.write(batch(["a"], 0))  # the head passed epoch 0: the whole epoch is committed
    zombie.commit()
    assert zombie.result.skipped_shards == [0] and zombie.result.written == 0
    zombie.close()

    def write_epoch_1(epoch: int, shards: int) -> list[TaskResult]:
        task = RedisShardTask(sink._task_writer(epoch, TASK_COLUMNS).target, epoch)  # type: ignore[attr-defined]
        task.write(batch(["d", "e", "f"], epoch))
        sink_redis.client().delete(task.stage_key)  # e.g. expired, or a Redis without AOF
        with pytest.raises(ExactlyOnceError, match="EO_STAGING_LOST"):
            task.commit()
        task.close()
        raise RuntimeError("task failed")

    with pytest.raises(RuntimeError, match="task failed"):
        sink.run_epoch(1, None, schema, lambda: 1, write_epoch_1)
    r = sink_redis.client()
    assert not r.exists(*[f"{unique_name}:{x}" for x in "def"]), "nothing of the shard applied"
    assert not r.exists(f"{sink.prefix}:done:1")


def test_the_write_counter_sees_a_second_write(sink_redis: SinkRedis, unique_name: str) -> None:
    """A unique key hides a double write; the AOF count does not: the check can fail."""
    r = sink_redis.client()
    r.hset(f"{unique_name}:k", "a", "1")
    r.hset(f"{unique_name}:k", "a", "1")
    r.hset(f"{unique_name}:j", "a", "1")
    assert sink_redis.write_counts("HSET", f"{unique_name}:") == {
        f"{unique_name}:k": 2,
        f"{unique_name}:j": 1,
    }


@pytest.mark.parametrize("armed", [False, True], ids=["unarmed", "armed"])
def test_mid_write_is_on_the_path_of_a_task_bigger_than_its_chunks_armed_or_not(
    sink_redis: SinkRedis, unique_name: str, monkeypatch: pytest.MonkeyPatch, armed: bool
) -> None:
    """A task of more records than ``pipeline_size`` stages chunks as it goes, and
    ``mid_write`` sits after each stage, with records sent before it and more after it. Arming
    the point changes nothing on that path (it once staged half of any task up front); the
    crash tests and ``exactlyonce chaos`` make small tasks take it with a smaller chunk
    (``EXACTLYONCE_CRASH_PIPELINE_SIZE``), as PostgreSQL's ``mid_copy`` does with COPY chunks."""
    monkeypatch.setenv(task_module.STAGE_ROWS_ENV, "2")
    sink = new_sink(sink_redis, unique_name, dedup=False, shards=1)  # default pipeline_size
    schema = StructType([StructField("event_id", StringType())])
    steps: list[str] = []
    monkeypatch.setattr(task_module, "crash_point", lambda name, epoch: steps.append(name))
    if armed:
        monkeypatch.setenv("EXACTLYONCE_CRASH_AT", "mid_write")

    def write(epoch: int, shards: int) -> list[TaskResult]:
        task = RedisShardTask(sink._task_writer(epoch, TASK_COLUMNS).target, epoch)  # type: ignore[attr-defined]
        add = task._add
        monkeypatch.setattr(task, "_add", lambda chunk, n: (steps.append("add"), add(chunk, n)))
        task.write(batch([f"e{i}" for i in range(6)], epoch))
        assert steps == ["add", "add", "mid_write", "add", "mid_write"], steps
        assert sink_redis.client().hlen(task.stage_key) == 2, "two chunks reached Redis"
        task.commit()
        assert task.status == 1 and task.result.written == 6
        task.close()
        return [task.result]

    sink.run_epoch(0, None, schema, lambda: 1, write)
    assert len(sink_redis.write_counts("HSET", f"{unique_name}:e")) == 6


# ---------------------------------------------------------------------- control keys


def control_dead_letters(server: SinkRedis, sink: RedisSink) -> dict[str, str]:
    """record ID -> error of every dead letter of ``sink``."""
    r = server.client()
    return {
        f[b"record_id"].decode(): f[b"error"].decode() for _, f in r.xrange(sink.dead_letter_key)
    }


def test_a_key_rendered_into_the_control_namespace_is_a_dead_letter_and_the_head_is_intact(
    sink_redis: SinkRedis, unique_name: str
) -> None:
    """DESIGN invariant 14: a record whose key would be the head, a shard marker or a catalog
    key is refused inside the atomic step (a dead letter with why); the rest is written, the
    head and the markers keep what the sink wrote, and the next epoch is not skipped."""
    sink = RedisSink(sink_redis.url, "{event_id}", ["event_id"], unique_name, dedup=False, shards=1)
    schema = StructType([StructField("event_id", StringType())])
    intruders = [
        sink.head_key,
        f"{sink.prefix}:done:5",
        f"{sink.prefix}:done-epochs",
        "eo:{another-query:0123456789}:meta",
    ]
    plain = [f"{unique_name}-a", f"{unique_name}-b"]

    def write(epoch: int, shards: int) -> list[TaskResult]:
        task = RedisShardTask(sink._task_writer(epoch, TASK_COLUMNS).target, epoch)  # type: ignore[attr-defined]
        task.write(batch([plain[0], *intruders, plain[1]], epoch))
        task.commit()
        task.close()
        return [task.result]

    report = sink.run_epoch(0, None, schema, lambda: 1, write)
    assert (report.written, report.dead_letters) == (2, len(intruders))
    r = sink_redis.client()
    head = {k.decode(): v.decode() for k, v in r.hgetall(sink.head_key).items()}
    assert head["epoch"] == "0" and head["num_shards"] == "1", head
    assert "event_id" not in head and "record_id" not in head, "the head was written over"
    assert not r.exists(f"{sink.prefix}:done:5"), "no shard marker made of a record"
    assert r.type(f"{sink.prefix}:done-epochs") in (b"set", b"none")
    assert not r.exists("eo:{another-query:0123456789}:meta")
    assert all(r.hget(k, "event_id") == k.encode() for k in plain)
    letters = control_dead_letters(sink_redis, sink)
    assert set(letters) == {record_id([k]) for k in intruders}
    assert all("control namespace" in why for why in letters.values()), letters

    report = sink.run_epoch(1, None, schema, lambda: 1, write)
    assert not report.skipped, "epoch 1 ran: the head said 0, not what a record wrote"
    assert sink.head() is not None and sink.head().epoch == 1  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("write", "mode"), [("hash", "insert"), ("string", "insert"), ("hash", "upsert")]
)
def test_spark_batches_cannot_write_over_the_head(
    spark: SparkSession, sink_redis: SinkRedis, unique_name: str, write: str, mode: str
) -> None:
    """The same through foreachBatch: a row whose key renders to the head key (a custom
    prefix reachable from the template) is a dead letter; the head still says the epoch.
    A string write would SET over a hash of any type; an upsert would DEL it first."""
    prefix = f"{unique_name}-ctl"
    sink = RedisSink(
        sink_redis.url,
        unique_name + "{event_id}",  # the intruder's event_id is "-ctl:head"
        ["event_id"],
        unique_name,
        prefix=prefix,
        dedup=False,
        write=write,  # type: ignore[arg-type]
        mode=mode,  # type: ignore[arg-type]
    )
    df = events(spark, 0, 10).withColumn(
        "event_id",
        F.when(F.col("amount") == 30, F.lit("-ctl:head")).otherwise(F.col("event_id")),
    )
    sink(df, 0)
    report = sink.last_report
    assert report is not None and (report.written, report.dead_letters) == (9, 1)
    r = sink_redis.client()
    assert r.type(f"{prefix}:head") == b"hash"
    assert r.hget(f"{prefix}:head", "epoch") == b"0"
    assert r.hget(f"{prefix}:head", "amount") is None, "the head was written over"
    letters = control_dead_letters(sink_redis, sink)
    assert list(letters.values()) == [
        f"key {prefix}:head is in the sink's control namespace {prefix}: (its head, shard "
        "markers, offsets and catalog): change key_template or prefix"
    ]
    sink(events(spark, 10, 12), 1)
    assert sink.last_report is not None and sink.last_report.written == 2
