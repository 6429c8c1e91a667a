"""RedisSink.realtime(): Spark Real-time Mode into Redis, exactly once by source frontiers
(each chunk and its frontiers in one Lua script).

Drives the writer as Spark's task does (``open``/``process``/``close``) against the sink's
real redis-server (AOF on). Audits: ``redis-cli XRANGE`` for stream writes (a second write is
a second entry), the AOF's HSET commands for hash writes (committed attempts per key).
"""

from __future__ import annotations

import pickle
from collections import Counter
from typing import Any

import pytest
from pyspark.sql import Row
from pyspark.sql.types import StructType

from exactlyonce.connectors import RedisSink
from exactlyonce.connectors.base.realtime import RealtimeWriter
from exactlyonce.errors import ConfigError, FrontierMovedError
from tests.support.realtime import rows, run_epoch, source_schema
from tests.support.redis_fixtures import SinkRedis

SCHEMA = source_schema()


def sink_of(sink_redis: SinkRedis, name: str, **options: Any) -> RedisSink:
    settings = {"id_from": "content", "write": "stream", **options}
    template = settings.pop("key_template", f"{name}:events")
    return RedisSink(sink_redis.url, template, None, name, **settings)


def writer_of(sink_redis: SinkRedis, name: str, **options: Any) -> RealtimeWriter:
    return sink_of(sink_redis, name, **options).realtime(SCHEMA, commit_interval=60)


def stream_events(sink_redis: SinkRedis, key: str) -> Counter[str]:
    """Entries per event_id, read with redis-cli (XRANGE, raw: id, then field/value lines)."""
    lines = sink_redis.cli_raw("XRANGE", key, "-", "+")
    return Counter(lines[i + 1] for i, line in enumerate(lines[:-1]) if line == "event_id")


def test_a_rerun_skips_what_the_frontier_covers(sink_redis: SinkRedis, unique_name: str) -> None:
    run_epoch(writer_of(sink_redis, unique_name), 3, [*rows(range(10)), *rows(range(4), 1)])
    sink = sink_of(sink_redis, unique_name)
    assert sink.source_frontiers() == {("t", 0): 10, ("t", 1): 4}
    again = writer_of(sink_redis, unique_name)
    run_epoch(again, 3, [*rows(range(15)), *rows(range(6), 1)])  # the epoch, re-run, longer
    assert again.tracker.skipped == 14
    # each offset once per partition; both partitions' events are named e0, e1, ...
    expected = {f"e{o}": 2 for o in range(6)} | {f"e{o}": 1 for o in range(6, 15)}
    assert stream_events(sink_redis, f"{unique_name}:events") == expected
    assert sink.source_frontiers() == {("t", 0): 15, ("t", 1): 6}


def test_hash_writes_are_applied_once_per_record_across_a_rerun(
    sink_redis: SinkRedis, unique_name: str
) -> None:
    template = {"write": "hash", "key_template": f"{unique_name}:{{partition}}:{{offset}}"}
    run_epoch(writer_of(sink_redis, unique_name, **template), 0, rows(range(8)))
    run_epoch(writer_of(sink_redis, unique_name, **template), 0, rows(range(12)))  # re-run
    counts = sink_redis.write_counts("HSET", f"{unique_name}:0:")  # the AOF: committed writes
    assert counts == {f"{unique_name}:0:{o}": 1 for o in range(12)}
    assert sink_redis.cli_raw("HGET", f"{unique_name}:0:11", "event_id") == ["e11"]


def test_a_writer_whose_frontier_moved_writes_nothing(
    sink_redis: SinkRedis, unique_name: str
) -> None:
    slow, fast = writer_of(sink_redis, unique_name), writer_of(sink_redis, unique_name)
    slow.open(0, 1)
    slow.process(rows(range(1))[0])  # reads the frontier: none yet
    run_epoch(fast, 1, rows(range(5)))  # another attempt of the task commits first
    with pytest.raises(FrontierMovedError, match="moved it"):
        slow.close(None)
    assert stream_events(sink_redis, f"{unique_name}:events") == {f"e{o}": 1 for o in range(5)}
    assert sink_of(sink_redis, unique_name).source_frontiers() == {("t", 0): 5}


def test_a_record_without_its_key_column_is_a_dead_letter_and_the_frontier_moves_on(
    sink_redis: SinkRedis, unique_name: str
) -> None:
    template = {"write": "hash", "key_template": f"{unique_name}:{{event_id}}"}
    batch = [*rows(range(2)), Row(topic="t", partition=0, offset=2, event_id=None)]
    run_epoch(writer_of(sink_redis, unique_name, **template), 0, batch)
    assert sink_redis.cli_raw("HGET", f"{unique_name}:e1", "event_id") == ["e1"]
    sink = sink_of(sink_redis, unique_name, **template)
    letters = sink_redis.cli_raw("XRANGE", f"{sink.prefix}:dead-letters", "-", "+")
    assert "null key template column(s): event_id" in letters
    assert sink.source_frontiers() == {("t", 0): 3}


def test_a_key_in_the_sinks_control_namespace_is_refused_not_written(
    sink_redis: SinkRedis, unique_name: str
) -> None:
    prefix = f"{unique_name}-ctl"
    template = {"write": "hash", "prefix": prefix, "key_template": "{event_id}"}
    evil = Row(topic="t", partition=0, offset=0, event_id=f"{prefix}:rtm:frontiers")
    run_epoch(writer_of(sink_redis, unique_name, **template), 0, [evil, *rows(range(1, 3))])
    assert sink_redis.cli_raw("HGET", f"{prefix}:rtm:frontiers", "t|0") == ["3"]
    letters = sink_redis.cli_raw("XRANGE", f"{prefix}:dead-letters", "-", "+")
    assert any("control namespace" in line for line in letters)


def test_refusals_before_the_stream(sink_redis: SinkRedis, unique_name: str) -> None:
    with pytest.raises(ConfigError, match="key_template"):
        sink_of(sink_redis, unique_name, key_template="{nope}").realtime(SCHEMA)
    without_offset = StructType([f for f in SCHEMA.fields if f.name != "offset"])
    with pytest.raises(ConfigError, match=r"source_columns.*\['offset'\]"):
        sink_of(sink_redis, unique_name).realtime(without_offset)
    upsert = RedisSink(
        sink_redis.url, "{event_id}", ["event_id"], unique_name, write="hash", mode="upsert"
    )
    with pytest.raises(ConfigError, match="upsert"):
        upsert.realtime(SCHEMA)


def test_the_writer_pickles_without_a_connection(sink_redis: SinkRedis, unique_name: str) -> None:
    writer = writer_of(sink_redis, unique_name)
    writer.open(0, 0)
    writer.process(rows(range(1))[0])
    copy = pickle.loads(pickle.dumps(writer))
    writer.close(RuntimeError("stop"))
    assert copy.store is None and copy.lock is None and copy.options == writer.options
    assert sink_redis.password not in repr(copy.target)
    assert stream_events(sink_redis, f"{unique_name}:events") == {}
