"""kill -9 ``exactlyonce drain`` (a real subprocess) while it drains ONE buffer into each sink a
drainer writes besides a PostgreSQL table in mode insert (tests/crash/test_drainer_crash.py):
Redis hash, string and stream, Elasticsearch, and a PostgreSQL table in mode append; restart it
until caught up; count the writes.

Real Spark fills the buffer once for the module (the pipeline's own ``Buffered`` sink, epoch by
epoch, with duplicates and null keys, small frames). Then, per target, its own pipeline file
(same query, same buffer, its own sink, small transactions) is drained and SIGKILLed at the
named points ``drain_before_write``, ``drain_mid_write`` (Redis: the script sent, its reply not
read: a lost reply; Elasticsearch: records acknowledged, offsets not written) and
``drain_after_commit``, at seeded-random chunk numbers, and once at a seeded moment while it
writes (a seeded number of transactions in); every kill, the last one too, is asserted to have
happened, the last one before the drain was done.

The audit counts WRITES: Redis through the sink server's AOF (every HSET/SET/XADD a script ran,
tests/support/redis_fixtures.py), plus the stream's entries per record ID; Elasticsearch (no
server is installable here: the stand-in lab/es_stand_in/, unless ELASTICSEARCH_URL)
through the stand-in's per-``_id`` create attempts, 409s and successful writes, and
``_version`` (1 for every document); the append table through tests/support/audit.py's
triggers (committed insert attempts and rows inserted; no unique index there hides a second
write; a kill mid-write is checked to leave a transaction open).
0 duplicates, 0 missing, and the stored offsets end at the buffer's frontier. The targets'
offsets are kept apart by (query, sink name, topic): all of them drain one buffer, one after
the other, and each must write every record (one resuming at another's offsets would write
none, and never reach its first crash point).
"""

from __future__ import annotations

import json
import random
import re
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql
from pyspark.sql import SparkSession

from exactlyonce.connectors.elasticsearch import ElasticsearchSink
from exactlyonce.connectors.kafka.buffer import Buffered
from exactlyonce.connectors.kafka.reader import load_commits
from exactlyonce.connectors.postgres import PostgresSink
from exactlyonce.connectors.postgres.drain import OFFSETS
from exactlyonce.connectors.redis import RedisSink
from exactlyonce.connectors.search.drain import offsets_doc_id
from exactlyonce.dedup.ids import record_id
from exactlyonce.integration.config import build_sink, load_config
from tests.crash.harness import crash_seed, make_input
from tests.crash.test_drainer_crash import DrainProcess
from tests.support.audit import assert_exactly_once, install_audit
from tests.support.es_fixtures import EsHandle
from tests.support.kafka_audit import read_topic
from tests.support.pipelines import buffered_pipeline, fill_buffer
from tests.support.redis_fixtures import SinkRedis, sink_redis_server

pytestmark = [pytest.mark.crash, pytest.mark.integration]

SCHEMA = "event_id STRING, amount BIGINT, action STRING"
FRAME_RECORDS = 5
BATCH_SIZE = 40  # records per drain transaction: ~8 chunks go by before the last kill
NAMED_POINTS = ["drain_before_write", "drain_mid_write", "drain_after_commit"]


@dataclass
class Buffer:
    """The module's filled buffer: query and topic ``name``, the IDs it holds, its frontier."""

    name: str
    workdir: Path
    expected: set[str]
    frontier: dict[int, int]
    bootstrap: str
    seed: int

    def pipeline(self, sink: str, suffix: str) -> Path:
        """A pipeline file draining this buffer into ``sink`` (the sink section's lines)."""
        path = self.workdir / f"{suffix}.yaml"
        text = buffered_pipeline(
            self.name,
            self.workdir,
            schema=SCHEMA,
            partitions=2,
            batch_size=BATCH_SIZE,
            sink=sink,
        )
        path.write_text(text)
        return path


@pytest.fixture(scope="module")
def buffer(
    spark: SparkSession, services: dict[str, str], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Buffer]:
    import uuid

    seed = crash_seed("drain targets fill and kill schedule")
    name = f"t_drain_crash_{uuid.uuid4().hex[:8]}"
    workdir = tmp_path_factory.mktemp("drain-targets")
    data = make_input(workdir / "input", files=6, rows=260, seed=seed)
    sink_redis = sink_redis_server()
    filler = f"""\
  type: redis
  url: {sink_redis.url}
  key_template: "{name}:filler:{{event_id}}"
  id_columns: [event_id]
"""
    config = workdir / "fill.yaml"
    config.write_text(
        buffered_pipeline(
            name,
            workdir,
            schema=SCHEMA,
            partitions=2,
            batch_size=BATCH_SIZE,
            shards=2,
            frame_records=FRAME_RECORDS,
            sink=filler,
        )
    )
    buffered = fill_buffer(spark, config, SCHEMA)
    assert isinstance(buffered, Buffered)
    assert sum(r.written for r in buffered.reports) == len(data.expected_ids)
    assert sum(r.dead_letters for r in buffered.reports) == data.null_keys > 0
    assert len(data.expected_ids) > 12 * BATCH_SIZE, "too few records for every kill"
    bootstrap = services["KAFKA_BOOTSTRAP_SERVERS"]
    frontier = load_commits(bootstrap, name, topic=name).frontier(name)
    yield Buffer(name, workdir, data.expected_ids, frontier, bootstrap, seed)


def drain_with_kills(
    buffer: Buffer,
    config: Path,
    rng: random.Random,
    at_point: Callable[[DrainProcess, str], None] | None = None,
) -> DrainProcess:
    """Kill the drainer at every named point (a seeded chunk number each, in a seeded order)
    and at a seeded moment, then run it until caught up. ``at_point(drainer, point)`` runs
    at each named point, before the kill (the process waits there)."""
    schedule = list(NAMED_POINTS)
    rng.shuffle(schedule)
    drainer = DrainProcess(config.parent / config.stem, config)
    drainer.workdir.mkdir()
    for point in schedule:
        at = rng.randint(1, 3)
        crash_dir = drainer.start(crash_at=f"{point}@{at}")
        drainer.wait_for_marker(crash_dir, point)
        if at_point is not None:
            at_point(drainer, point)
        drainer.kill(f"{point}@{at}")
    # A seeded moment while it writes: a seeded number of transactions in, plus a moment.
    # (A time after the first write was too coarse: PostgreSQL drained the ~30 chunks left in
    # 0.2 s, and the kill came when the drainer was idle.)
    drainer.start()
    writes = rng.randint(1, 8)
    wait_for_writes(drainer, writes)
    time.sleep(rng.uniform(0.0, 0.01))
    assert drainer.proc is not None and drainer.proc.poll() is None, drainer.log_tail()
    drainer.kill(f"random moment (seed {buffer.seed}, after {writes} transactions)")
    drainer.start()
    drainer.finish()
    named = [k.partition("@")[0] for k in drainer.kills]
    assert sorted(named[: len(schedule)]) == sorted(NAMED_POINTS), drainer.kills
    assert len(drainer.kills) == len(schedule) + 1, drainer.kills
    last = re.search(r"stopped: (\d+) written", drainer.log_tail())
    assert last is not None and int(last[1]) > 0, "the seeded kill came before the drain's end"
    print(f"{config.stem}: kills {drainer.kills}; {drainer.log_tail(1)}")
    return drainer


def wait_for_writes(drainer: DrainProcess, n: int, timeout: float = 60) -> None:
    """Until the drainer reports its ``n``-th transaction (or exits)."""
    log = drainer.workdir / f"drain-{drainer.runs}.log"
    deadline = time.monotonic() + timeout
    while log.read_text(errors="replace").count("\ndrained ") < n:
        assert drainer.proc is not None
        if drainer.proc.poll() is not None:
            return
        assert time.monotonic() < deadline, f"not {n} writes in {timeout}s:\n{drainer.log_tail()}"
        time.sleep(0.005)


def no_drain_dead_letters(buffer: Buffer) -> None:
    topic = f"{buffer.name}.drain-dead-letters"
    assert read_topic(buffer.bootstrap, topic, "read_uncommitted") == [], "no record is bad"


# ---------------------------------------------------------------------- Redis


def redis_section(server: SinkRedis, name: str, write: str) -> str:
    template = {
        "hash": f"{name}:h:{{event_id}}",
        "string": f"{name}:s:{{event_id}}",
        "stream": f"{name}:x:{{action}}",
    }[write]
    return f"""\
  type: redis
  url: {server.url}
  key_template: "{template}"
  id_columns: [event_id]
  write: {write}
"""


def redis_offsets(server: SinkRedis, sink: RedisSink, topic: str) -> dict[int, int]:
    raw = server.client().hgetall(f"{sink.prefix}:drain-offsets:{topic}")
    return {int(p): int(o) for p, o in raw.items()}


def key_writes(server: SinkRedis, command: str, prefix: str) -> Counter[str]:
    return server.write_counts(command, prefix)


REDIS_AUDITS: dict[str, tuple[str, str]] = {"hash": ("HSET", ":h:"), "string": ("SET", ":s:")}


@pytest.mark.parametrize("write", ["hash", "string", "stream"])
def test_redis_drain_killed_anywhere_writes_each_record_once(
    buffer: Buffer, sink_redis: SinkRedis, write: str
) -> None:
    rng = random.Random(f"{buffer.seed}-redis-{write}")
    config = buffer.pipeline(redis_section(sink_redis, buffer.name, write), f"redis-{write}")
    drain_with_kills(buffer, config, rng)

    sink = build_sink(load_config(config).sink, check=False)
    assert isinstance(sink, RedisSink)
    if write == "stream":
        stream = f"{buffer.name}:x:click"
        entries = sink_redis.client().xrange(stream)
        appended = Counter(f[b"record_id"].decode() for _, f in entries)
        assert_once(appended, buffer.expected, "stream entries")
        assert key_writes(sink_redis, "XADD", stream) == {stream: len(buffer.expected)}
    else:
        command, infix = REDIS_AUDITS[write]
        writes = key_writes(sink_redis, command, f"{buffer.name}{infix}")
        by_event = Counter({k.rpartition(":")[2]: n for k, n in writes.items()})
        assert_once(by_event, set(event_ids(buffer)), f"{command} per key")
    assert redis_offsets(sink_redis, sink, buffer.name) == buffer.frontier
    no_drain_dead_letters(buffer)


def event_ids(buffer: Buffer) -> list[str]:
    """The event IDs behind the expected record IDs (keys are made of event IDs)."""
    lines = (buffer.workdir / "input").glob("part-*.json")
    events = {
        json.loads(line)["event_id"]
        for path in lines
        for line in path.read_text().splitlines()
        if line.strip()
    }
    found = [e for e in events if e is not None]
    assert {record_id([e]) for e in found} == buffer.expected
    return found


def assert_once(counts: Counter[str], expected: set[str], what: str) -> None:
    doubled = {k: n for k, n in counts.items() if n > 1}
    assert not doubled, f"{len(doubled)} written more than once ({what}): {list(doubled)[:5]}"
    missing = expected - set(counts)
    assert not missing, f"{len(missing)} missing ({what}): {sorted(missing)[:5]}"
    assert set(counts) == expected, f"unexpected ({what}): {sorted(set(counts) - expected)[:5]}"


# ---------------------------------------------------------------------- Elasticsearch


def test_es_drain_killed_anywhere_creates_each_document_once(buffer: Buffer, es: EsHandle) -> None:
    rng = random.Random(f"{buffer.seed}-es")
    index = buffer.name.replace("_", "-")
    section = f"""\
  type: elasticsearch
  hosts: [{es.url}]
  index: {index}
  id_columns: [event_id]
"""
    config = buffer.pipeline(section, "es")
    drain_with_kills(buffer, config, rng)

    writes = es.writes(index)  # successful creates per _id (or _version on a real cluster)
    assert_once(Counter(writes), buffer.expected, "creates per _id")
    if es.server is not None:
        versions = {i: es.server.version(index, i) for i in writes}
        assert set(versions.values()) == {1}, "every document at _version 1"
        attempts = es.server.attempts(index)
        resent = sum(attempts.values()) - len(buffer.expected)
        print(f"es: {resent} records re-sent after kills, each a 409 (a no-op)")
        assert resent > 0, "the kill mid-write left records to re-send: the 409 path ran"
        conflicts = es.server.conflicts(index)  # every re-send, and nothing else, refused
        assert sum(conflicts.values()) == resent and set(conflicts) <= buffer.expected
        assert max(conflicts.values()) <= len(NAMED_POINTS) + 1, "re-sent more than once a kill"
    sink = build_sink(load_config(config).sink, check=False)
    assert isinstance(sink, ElasticsearchSink)
    with es.client() as client:
        doc_id = offsets_doc_id(sink.query_name, sink.sink_name, buffer.name)
        doc = client.get(index=sink.control_index, id=doc_id)
    stored = {int(p): int(o) for p, o in doc["_source"]["offsets"].items()}
    assert stored == buffer.frontier
    no_drain_dead_letters(buffer)


# ---------------------------------------------------------------------- PostgreSQL, mode append


def test_pg_append_drain_killed_anywhere_appends_each_record_once(
    buffer: Buffer, spark: SparkSession, pg: psycopg.Connection[Any]
) -> None:
    """An append table has no unique index: a record the drainer wrote twice would be a
    second row, nothing hides it. The audit triggers count every committed insert attempt."""
    rng = random.Random(f"{buffer.seed}-pg-append")
    table = f"{buffer.name}_append"
    section = f"""\
  type: postgres
  dsn: ${{EXACTLYONCE_PG_DSN}}
  table: {table}
  id_columns: [event_id]
  mode: append
"""
    config = buffer.pipeline(section, "pg-append")
    sink = build_sink(load_config(config).sink, check=False)
    assert isinstance(sink, PostgresSink) and sink.mode == "append"
    sink.preflight(spark.createDataFrame([], SCHEMA).schema)  # the buffered query's preflight
    install_audit(pg, table)

    def inside_a_transaction(drainer: DrainProcess, point: str) -> None:
        if point != "drain_mid_write":
            return
        assert drainer.proc is not None
        open_tx = pg.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s "
            "AND state = 'idle in transaction'",
            [f"exactlyonce:drainer:{drainer.proc.pid}"],
        ).fetchone()
        assert open_tx is not None and open_tx[0] >= 1, "not inside an open transaction"

    drain_with_kills(buffer, config, rng, inside_a_transaction)

    assert_exactly_once(pg, table, buffer.expected)
    stored = pg.execute(
        sql.SQL(
            "SELECT partition, next_offset FROM {} WHERE query_name = %s AND sink = %s "
            "AND topic = %s"
        ).format(sql.Identifier(OFFSETS)),
        [buffer.name, sink.sink_name, buffer.name],
    ).fetchall()
    assert {int(p): int(o) for p, o in stored} == buffer.frontier
    no_drain_dead_letters(buffer)
