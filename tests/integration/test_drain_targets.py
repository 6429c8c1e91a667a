"""The drainer into every sink: one buffer, filled once by real Spark, drained into Redis (hash,
string, stream) and Elasticsearch; the local broker, the sink's own redis-server
(tests/support/redis_fixtures.py) and the Elasticsearch stand-in (tests/support/es_fixtures.py).

Writes are counted, not keys: Redis through the sink's AOF (every HSET/SET/XADD a script ran
is in it), stream appends through the entries per record ID; Elasticsearch through the
stand-in's write counters and ``_version`` (1 for every document).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from exactlyonce.buffer import Buffered, Drainer, KafkaBuffer
from exactlyonce.connectors.elasticsearch import ElasticsearchSink
from exactlyonce.connectors.kafka.reader import load_commits
from exactlyonce.connectors.redis import RedisSink
from exactlyonce.connectors.redis.drain import RedisDrainTarget
from exactlyonce.connectors.search.drain import offsets_doc_id
from exactlyonce.dedup.ids import record_id
from exactlyonce.errors import ConfigError, OffsetsMovedError
from exactlyonce.integration.config import build_sink, load_config
from tests.support.es_fixtures import EsHandle
from tests.support.events import events, ids
from tests.support.kafka_audit import read_topic
from tests.support.pipelines import buffered_pipeline
from tests.support.redis_fixtures import SinkRedis, sink_redis_server

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]

NULL_ACTIONS = range(500, 520)  # events whose action is null


@dataclass
class FilledBuffer:
    """A buffer topic holding 3 epochs of the query ``name`` (500 IDs with 50 repeated
    across epochs and 30 inside one, then 20 events with a null ``action``)."""

    name: str
    buffer: KafkaBuffer
    frontier: dict[int, int]

    def with_letters(self, suffix: str) -> KafkaBuffer:
        """The buffer with a drain dead-letter topic of this test's own."""
        topic = f"{self.name}.{suffix}.drain-dead-letters"
        return self.buffer.model_copy(update={"drain_dead_letter_topic_name": topic})


@pytest.fixture(scope="module")
def filled(spark: SparkSession, services: dict[str, str]) -> Iterator[FilledBuffer]:
    import uuid

    sink_redis = sink_redis_server()
    name = f"t_drain_targets_{uuid.uuid4().hex[:8]}"
    bootstrap = services["KAFKA_BOOTSTRAP_SERVERS"]
    buffer = KafkaBuffer(topic=name, bootstrap_servers=bootstrap, partitions=2, frame_records=7)
    filler = RedisSink(sink_redis.url, f"{name}:filler:{{event_id}}", ["event_id"], name)
    buffered = Buffered(filler, buffer)
    first = events(spark, 0, 300)
    buffered(first.union(first.limit(30)), 0)  # 30 repeated inside the batch
    buffered(events(spark, 250, 500), 1)  # 50 IDs seen in epoch 0
    nulls = events(spark, NULL_ACTIONS.start, NULL_ACTIONS.stop)
    buffered(nulls.withColumn("action", F.lit(None).cast("string")), 2)
    assert sum(r.written for r in buffered.reports) == 520
    frontier = load_commits(bootstrap, name, topic=name).frontier(name)
    yield FilledBuffer(name, buffer, frontier)


def redis_sink(server: SinkRedis, name: str, write: str, **kw: Any) -> RedisSink:
    template = {
        "hash": f"{name}:h:{{event_id}}",
        "string": f"{name}:s:{{event_id}}",
        "stream": f"{name}:x:{{action}}",
    }[write]
    return RedisSink(server.url, template, ["event_id"], name, write=write, **kw)  # type: ignore[arg-type]


def stored_offsets(server: SinkRedis, sink: RedisSink, topic: str) -> dict[int, int]:
    raw = server.client().hgetall(f"{sink.prefix}:drain-offsets:{topic}")
    return {int(p): int(o) for p, o in raw.items()}


def drain_letters(filled: FilledBuffer, buffer: KafkaBuffer) -> list[tuple[bytes, str]]:
    bootstrap = filled.buffer.bootstrap_servers
    msgs = read_topic(bootstrap, buffer.drain_dead_letter_topic, "read_uncommitted")
    return [(m.value, dict(m.headers or [])["eo-error"].decode()) for m in msgs]


# ---------------------------------------------------------------------- Redis


def test_redis_hash_each_record_once_with_its_columns_and_ttl(
    filled: FilledBuffer, sink_redis: SinkRedis
) -> None:
    sink = redis_sink(sink_redis, filled.name, "hash", ttl_seconds=600)
    buffer = filled.with_letters("hash")
    with Drainer(sink, buffer, batch_size=100) as drainer:
        report = drainer.drain_available(timeout_s=60)
    assert (report.written, report.dead_letters) == (520, 0)
    r = sink_redis.client()
    assert r.hgetall(f"{filled.name}:h:e7") == {
        b"event_id": b"e7",
        b"amount": b"70",
        b"action": b"click",
    }
    assert r.hgetall(f"{filled.name}:h:e505") == {b"event_id": b"e505", b"amount": b"5050"}, (
        "a null column is left out"
    )
    assert 0 < r.pttl(f"{filled.name}:h:e7") <= 600_000, "ttl_seconds honoured"
    writes = sink_redis.write_counts("HSET", f"{filled.name}:h:")
    assert len(writes) == 520 and set(writes.values()) == {1}, "each key written once"
    assert stored_offsets(sink_redis, sink, buffer.topic) == filled.frontier

    with Drainer(sink, buffer, batch_size=100) as again:  # a restart resumes at the frontier
        assert again.load_offsets() == filled.frontier
        assert again.drain_available(timeout_s=60).written == 0
    assert set(sink_redis.write_counts("HSET", f"{filled.name}:h:").values()) == {1}


def test_redis_string_stores_the_records_json_once(
    filled: FilledBuffer, sink_redis: SinkRedis
) -> None:
    sink = redis_sink(sink_redis, filled.name, "string")
    with Drainer(sink, filled.with_letters("string"), batch_size=64, writers=1) as drainer:
        report = drainer.drain_available(timeout_s=60)
    assert report.written == 520
    value = json.loads(sink_redis.client().get(f"{filled.name}:s:e505"))
    assert value == {"event_id": "e505", "amount": 5050, "action": None}, "the row, nulls kept"
    writes = sink_redis.write_counts("SET", f"{filled.name}:s:")
    assert len(writes) == 520 and set(writes.values()) == {1}


def test_redis_stream_appends_each_record_once_and_null_keys_are_dead_letters(
    filled: FilledBuffer, sink_redis: SinkRedis
) -> None:
    sink = redis_sink(sink_redis, filled.name, "stream")
    buffer = filled.with_letters("stream")
    with Drainer(sink, buffer, batch_size=50) as drainer:
        report = drainer.drain_available(timeout_s=60)
    assert (report.written, report.dead_letters) == (500, 20)
    entries = sink_redis.client().xrange(f"{filled.name}:x:click")
    appended = Counter(fields[b"record_id"].decode() for _, fields in entries)
    assert appended == Counter(ids(0, 500)), "every record appended once"
    epochs = Counter(int(fields[b"epoch"]) for _, fields in entries)
    assert epochs == {0: 300, 1: 200}, "each entry keeps its Spark batch's epoch"
    letters = drain_letters(filled, buffer)
    assert len(letters) == 20
    assert {why for _, why in letters} == {"null key template column(s): action"}
    assert stored_offsets(sink_redis, sink, buffer.topic) == filled.frontier


def test_redis_refused_records_go_to_the_sinks_dead_letter_stream(
    filled: FilledBuffer, sink_redis: SinkRedis
) -> None:
    """A key holding another type (WRONGTYPE) is refused inside the atomic script: the
    record goes to the sink's dead-letter stream in the same step, the rest is written."""
    template = f"{filled.name}:w:{{event_id}}"
    sink = RedisSink(sink_redis.url, template, ["event_id"], filled.name, sink_name="wrongtype")
    sink_redis.client().set(f"{filled.name}:w:e3", "a string, not a hash")
    with Drainer(sink, filled.with_letters("wrongtype"), batch_size=200) as drainer:
        report = drainer.drain_available(timeout_s=60)
    assert (report.written, report.dead_letters) == (519, 1)
    letters = sink_redis.client().xrange(sink.dead_letter_key)
    assert len(letters) == 1
    fields = letters[0][1]
    assert fields[b"record_id"].decode() == record_id(["e3"])
    assert fields[b"error"].startswith(b"redis: WRONGTYPE")


def test_redis_moved_offsets_are_never_written_over(
    filled: FilledBuffer, sink_redis: SinkRedis
) -> None:
    """The script's compare-and-set: offsets another drainer moved stop the share, with
    nothing of it written; the drainer re-reads them and resumes from there."""
    sink = RedisSink(
        sink_redis.url, f"{filled.name}:c:{{event_id}}", ["event_id"], filled.name, sink_name="cas"
    )
    drainer = Drainer(sink, filled.with_letters("cas"), batch_size=100, writers=1)
    try:
        assert drainer.step().written > 0
        key = f"{sink.prefix}:drain-offsets:{filled.name}"
        r = sink_redis.client()
        before = r.hgetall(key)
        r.hset(key, "0", int(before[b"0"]) + 1)  # another drainer moved partition 0
        keys_before = len(list(r.scan_iter(match=f"{filled.name}:c:*")))
        with pytest.raises(OffsetsMovedError):
            drainer.step()
        assert len(list(r.scan_iter(match=f"{filled.name}:c:*"))) == keys_before
        r.hset(key, "0", before[b"0"])  # put back: the retry re-reads and goes on
        drainer.drain_available(timeout_s=60)
    finally:
        drainer.close()
    assert len(list(sink_redis.client().scan_iter(match=f"{filled.name}:c:*"))) == 520


def test_a_stream_behind_a_buffer_without_the_catalog_is_refused(
    filled: FilledBuffer, sink_redis: SinkRedis
) -> None:
    sink = redis_sink(sink_redis, filled.name, "stream")
    with pytest.raises(ConfigError, match="catalog") as refused:
        Buffered(sink, filled.buffer, dedup=False)
    assert refused.value.field == "dedup"


def test_redis_a_drained_key_in_the_control_namespace_is_a_dead_letter(
    filled: FilledBuffer, sink_redis: SinkRedis
) -> None:
    """DESIGN invariant 14 on the drain path: with ``prefix="<name>:e7"``, event e7's key
    ``<name>:e7:x`` lies in the sink's own namespace (where its head and drain offsets live):
    it is refused in the atomic script, a dead letter of the sink's; the offsets stay the
    drainer's."""
    name = filled.name
    prefix = f"{name}:e7"
    sink = RedisSink(sink_redis.url, f"{name}:{{event_id}}:x", ["event_id"], name, prefix=prefix)
    with Drainer(sink, filled.with_letters("control"), batch_size=200) as drainer:
        report = drainer.drain_available(timeout_s=60)
    assert (report.written, report.dead_letters) == (519, 1)
    r = sink_redis.client()
    assert not r.exists(f"{prefix}:x")
    assert r.hgetall(f"{name}:e70:x")[b"event_id"] == b"e70"
    letters = [f for _, f in r.xrange(sink.dead_letter_key)]
    assert [f[b"record_id"].decode() for f in letters] == [record_id(["e7"])]
    assert f"control namespace {prefix}:".encode() in letters[0][b"error"]
    assert stored_offsets(sink_redis, sink, name) == filled.frontier


def test_redis_target_names_its_offsets_by_query_sink_and_topic(sink_redis: SinkRedis) -> None:
    a = RedisSink(sink_redis.url, "a:{k}", ["k"], "q", write="hash", dedup=False, check=False)
    b = RedisSink(sink_redis.url, "a:{k}", ["k"], "q", write="string", dedup=False, check=False)
    keys = {RedisDrainTarget(s, "topic").offsets_key for s in (a, b)}
    assert len(keys) == 2, "two sinks draining one buffer keep apart offsets"


# ---------------------------------------------------------------------- Elasticsearch


def es_sink(es: EsHandle, filled: FilledBuffer, index: str = "", **kw: Any) -> ElasticsearchSink:
    """An Elasticsearch sink of the buffer's query, into ``<query>[-index]``."""
    name = f"{filled.name}-{index}" if index else filled.name
    return ElasticsearchSink(es.url, name.replace("_", "-"), ["event_id"], filled.name, **kw)


def es_offsets(es: EsHandle, sink: ElasticsearchSink, topic: str) -> dict[int, int]:
    with es.client() as client:
        doc_id = offsets_doc_id(sink.query_name, sink.sink_name, topic)
        doc = client.get(index=sink.control_index, id=doc_id)
    return {int(p): int(o) for p, o in doc["_source"]["offsets"].items()}


def test_es_each_record_created_once_then_the_offsets(filled: FilledBuffer, es: EsHandle) -> None:
    sink = es_sink(es, filled)
    buffer = filled.with_letters("es")
    with Drainer(sink, buffer, batch_size=100) as drainer:
        report = drainer.drain_available(timeout_s=60)
    assert (report.written, report.duplicates, report.dead_letters) == (520, 0, 0)
    writes = es.writes(sink.index)
    assert len(writes) == 520 and set(writes.values()) == {1}, "each _id written once"
    docs = es.docs(sink.index)
    assert docs[record_id(["e7"])] == {
        "event_id": "e7",
        "amount": 70,
        "action": "click",
        "epoch": 0,
    }
    assert docs[record_id(["e505"])]["action"] is None and docs[record_id(["e505"])]["epoch"] == 2
    assert set(docs) == ids(0, 520)
    assert es_offsets(es, sink, buffer.topic) == filled.frontier

    with Drainer(sink, buffer) as again:
        assert again.load_offsets() == filled.frontier
        assert again.drain_available(timeout_s=60).written == 0
    assert set(es.writes(sink.index).values()) == {1}


def test_es_refused_items_are_drain_dead_letters_the_rest_is_written(
    filled: FilledBuffer, es: EsHandle
) -> None:
    """A mapping that cannot take most values (``amount`` a byte: 0..127): those items are
    refused (400) and dead-lettered with the reason; the others are written."""
    sink = es_sink(es, filled, "byte", mapping={"amount": "byte"})
    buffer = filled.with_letters("es-byte")
    with Drainer(sink, buffer, batch_size=200) as drainer:
        report = drainer.drain_available(timeout_s=60)
    fits = {record_id([f"e{n}"]) for n in range(520) if 10 * n <= 127}
    assert (report.written, report.dead_letters) == (len(fits), 520 - len(fits))
    assert set(es.writes(sink.index)) == fits
    letters = drain_letters(filled, buffer)
    assert len(letters) == 520 - len(fits)
    assert all(why.startswith("refused by the sink: 400") for _, why in letters), letters[0]
    assert es_offsets(es, sink, buffer.topic) == filled.frontier


def test_es_moved_offsets_and_a_lost_reply_are_never_written_over(
    filled: FilledBuffer, es: EsHandle
) -> None:
    """The offsets document's compare-and-set: moved by another drainer, the share's offsets
    are not written (its records are, once); a write whose reply was lost is seen moved,
    re-read, and the drain goes on from there. Every document keeps _version 1."""
    server = es.require_server("drop a reply")
    sink = es_sink(es, filled, "cas")
    drainer = Drainer(sink, filled.with_letters("es-cas"), batch_size=100, writers=1)
    doc_id = offsets_doc_id(filled.name, sink.sink_name, filled.name)
    try:
        assert drainer.step().written > 0
        with es.client() as client:
            doc = client.get(index=sink.control_index, id=doc_id)
            moved = {**doc["_source"], "offsets": {**doc["_source"]["offsets"], "0": 1}}
            client.index(index=sink.control_index, id=doc_id, document=moved)
            with pytest.raises(OffsetsMovedError):
                drainer.step()
            client.index(index=sink.control_index, id=doc_id, document=doc["_source"])
        server.drop_after_apply(1, what="doc")  # the next offsets write: applied, no reply
        report = drainer.drain_available(timeout_s=60)
    finally:
        drainer.close()
    assert server.dropped_replies >= 1 and report.retries >= 1
    writes = es.writes(sink.index)
    assert len(writes) == 520 and set(writes.values()) == {1}
    assert es_offsets(es, sink, filled.name) == filled.frontier


def test_es_index_mode_is_not_drained(filled: FilledBuffer, es: EsHandle) -> None:
    sink = es_sink(es, filled, op_type="index", check=False)
    with pytest.raises(ConfigError, match="op_type='create'"):
        Buffered(sink, filled.buffer)


# ---------------------------------------------------------------------- the command line


def drain_command(config: Path, *args: str) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [sys.executable, "-m", "exactlyonce", "drain", str(config), "--until-idle", "2", *args],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    return done


def cli_pipeline(filled: FilledBuffer, tmp_path: Path, sink: str) -> Path:
    config = tmp_path / "pipeline.yaml"
    text = buffered_pipeline(
        filled.name,
        tmp_path,
        schema="event_id STRING, amount BIGINT, action STRING",
        partitions=2,
        batch_size=100,
        sink=sink,
    )
    config.write_text(text)
    return config


def test_cli_drains_redis_with_two_processes_and_resets_its_offsets(
    filled: FilledBuffer, sink_redis: SinkRedis, tmp_path: Path
) -> None:
    prefix = f"{filled.name}:cli:"
    config = cli_pipeline(
        filled,
        tmp_path,
        f"""\
  type: redis
  url: {sink_redis.url}
  key_template: "{prefix}{{event_id}}"
  id_columns: [event_id]
""",
    )
    drain_command(config, "--processes", "2")
    writes = sink_redis.write_counts("HSET", prefix)
    assert len(writes) == 520 and set(writes.values()) == {1}
    sink = build_sink(load_config(config).sink, check=False)
    assert isinstance(sink, RedisSink)
    assert stored_offsets(sink_redis, sink, filled.name) == filled.frontier

    out = drain_command(config, "--reset-offsets", "--yes").stdout
    assert "drain offsets of" in out and "reset (2 partitions)" in out
    again = sink_redis.write_counts("HSET", prefix)
    assert set(again.values()) == {2}, "a reset drains again: hash keys are written again"
    assert stored_offsets(sink_redis, sink, filled.name) == filled.frontier


def test_cli_drains_elasticsearch_with_two_processes_and_a_reset_is_a_no_op(
    filled: FilledBuffer, es: EsHandle, tmp_path: Path
) -> None:
    index = f"{filled.name}-cli".replace("_", "-")
    config = cli_pipeline(
        filled,
        tmp_path,
        f"""\
  type: elasticsearch
  hosts: [{es.url}]
  index: {index}
  id_columns: [event_id]
""",
    )
    drain_command(config, "--processes", "2")
    assert len(es.writes(index)) == 520 and set(es.writes(index).values()) == {1}
    sink = build_sink(load_config(config).sink, check=False)
    assert isinstance(sink, ElasticsearchSink)
    assert es_offsets(es, sink, filled.name) == filled.frontier
    done = drain_command(config, "--reset-offsets", "--yes")
    assert "stopped: 0 written, 520 duplicates" in done.stdout, done.stdout
    # Not on a terminal: the drain's progress is plain lines on stderr, no bar.
    finished = r"^drain: 520/[\d,]+ records \(\d+%\), [\d,]+ records/s; done in [\d.]+ s$"
    assert re.search(finished, done.stderr, re.M), done.stderr[-3000:]
    assert "\r" not in done.stderr and "█" not in done.stderr
    assert set(es.writes(index).values()) == {1}, "after a reset every record is a 409"
    assert es_offsets(es, sink, filled.name) == filled.frontier
