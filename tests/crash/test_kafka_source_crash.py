"""The pipeline users run: a Kafka topic -> ``exactlyonce run`` -> each sink, SIGKILLed and
restarted, then audited with a reader we did not write.

One source topic (2 partitions) for the whole module: a few thousand JSON events produced
here with confluent-kafka (idempotent, so its delivery reports are every record's exact
coordinates), some of them produced twice at other offsets, as an at-least-once upstream
does. Each cell, one sink in one identity mode, runs its own query from offset 0 over it:

- ``id_from: source``: the ID is made of the record's Kafka coordinates, so a re-read of
  the same offsets (a re-run batch) collapses, and an event produced twice is two records,
  kept twice;
- ``id_columns: [event_id]``: an event produced twice collapses into one record.

The sinks, each in the mode where a second write shows: PostgreSQL ``mode: append`` (no
unique index: a duplicate is a second row), Kafka (a plain read_committed consumer),
Redis ``write: stream`` (a duplicate is a second entry), and Elasticsearch with
``op_type: index`` (a second write of an ``_id`` leaves ``_version`` 2). No Elasticsearch
server is installable here: its cells run against the stand-in the tests start
(exactlyonce/integration/lab/es_stand_in/, the ``es`` fixture), over HTTP like a real cluster.

Every cell's schedule, on one checkpoint: ``exactlyonce run`` (``trigger: available_now``,
a few epochs per run) SIGKILLed whole (its session: the CLI, Spark's JVM, the Python workers)
at a seeded random moment after it committed an epoch, then at the named point
``after_head`` (the sink's head advanced, Spark's commit log not yet written), then at two
more random moments; a last run to the end (in epochs of ``FINAL_FILES_PER_TRIGGER`` times
as many records, as the harness's last runs all read). Every scheduled kill is asserted to
have happened. The audit reads the sink with a plain client (psycopg SQL, redis XRANGE, a
confluent-kafka consumer, raw HTTP to ``_search``) and checks each record ID against the IDs
computed here from what was produced: no duplicate, none missing, none unexpected; the
record IDs of ``id_from: source`` are recomputed here from the coordinates with hashlib.
Then the negative control: one record written a second time with the same plain client
must show in the same reading and fail the same audit. Replay a schedule with
``EXACTLYONCE_CRASH_SEED=<seed>`` (printed).

Elasticsearch with ``op_type: index`` rewrites a document its re-run re-sends: its
guarantee is "idempotent, then the shard commit" (the class docstring), so a record whose
bulk was acknowledged before a kill, and whose shard commit was not, is sent again and
overwrites its own identical copy. Its ``columns`` cell is also SIGKILLed at ``mid_bulk`` to
make that happen every run; the check is exact where the protocol promises one write (no
other sink may show a rewrite) and bounded where it promises idempotence (a document's
``_version`` at most 1 + the run's kills), and the rewrites are printed.

Markers: the file's name gives every cell ``kafka`` (the source); each sink's cells also
get their sink's marker (``pytest -m redis`` runs the Redis cells).
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import subprocess
import sys
import urllib.request
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
import pytest
import redis
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

from exactlyonce.dedup.ids import record_id
from tests.crash.harness import FINAL_FILES_PER_TRIGGER, ROOT, Job, crash_seed
from tests.support.es_fixtures import EsHandle
from tests.support.kafka_audit import named_headers
from tests.support.redis_fixtures import SinkRedis
from tests.support.secrets_scan import event_log_conf

pytestmark = [pytest.mark.crash, pytest.mark.integration]

PARTITIONS = 2
EVENTS = 3000  # distinct events
RESENT = 300  # of them produced a second time, at other offsets
INPUT_SEED = 31
MAX_OFFSETS_PER_TRIGGER = 150  # records per epoch, both partitions together
RANDOM_KILLS = 3
MAX_DELAY_S = 3.0  # a random kill: this long at most after the run's first commit
NAMED_POINT = "after_head"  # the head advanced, Spark's commit log not yet written
RUN_TIMEOUT_S = 300

PIPELINE = """\
query_name: {name}
checkpoint: {checkpoint}
trigger: {{available_now: true}}
source:
  type: kafka
  bootstrap_servers: ${{KAFKA_BOOTSTRAP_SERVERS}}
  topic: {topic}
  max_offsets_per_trigger: {max_offsets}
  schema: "event_id STRING, n BIGINT"
sink:
{sink}  {identity}
  shards: 2
  redis_url: ${{EXACTLYONCE_REDIS_URL}}
  dedup: {{expected_ids: 5000}}
spark:
  master: local[2]
  conf:
    spark.sql.shuffle.partitions: "2"
    # the event log (uncompressed), for the harness's credential scan of every run's files
    spark.eventLog.enabled: "true"
    spark.eventLog.dir: "{event_log}"
    spark.eventLog.compress: "false"
"""
IDENTITIES = {"source": "id_from: source", "columns": "id_columns: [event_id]"}


# -- the source topic ------------------------------------------------------------------


@dataclass(frozen=True)
class Produced:
    """One record of the source topic: the event and where the broker put it."""

    event_id: str
    n: int
    partition: int
    offset: int


@dataclass(frozen=True)
class SourceTopic:
    name: str
    records: tuple[Produced, ...]

    def keys(self, identity: str) -> list[list[Any]]:
        """The key values of every expected record: coordinates, or event IDs."""
        if identity == "source":
            return [[self.name, r.partition, r.offset] for r in self.records]
        return [[e] for e in sorted({r.event_id for r in self.records})]

    def expected(self, identity: str) -> tuple[set[str], Counter[str]]:
        """The record IDs the sink must hold, once each, and how many records per event."""
        if identity == "source":
            ids = {source_id(self.name, r.partition, r.offset) for r in self.records}
            return ids, Counter(r.event_id for r in self.records)
        events = {r.event_id for r in self.records}
        return {record_id([e]) for e in events}, Counter(dict.fromkeys(events, 1))


def source_id(topic: str, partition: int, offset: int) -> str:
    """The record ID of ``id_from: source``, recomputed here: the MD5 of the compact JSON
    array of the coordinates as text (exactlyonce/dedup/ids.py: several key columns are
    hashed as ``to_json(array(cast(c as string)...))``)."""
    encoded = json.dumps([topic, str(partition), str(offset)], separators=(",", ":"))
    return hashlib.md5(encoded.encode()).hexdigest()


def plan_events(rng: random.Random) -> list[tuple[str, int]]:
    """``EVENTS`` events in order, ``RESENT`` of them a second time: half soon after the
    first copy (often in its epoch), half anywhere later (a later epoch)."""
    placed = [(float(i), (f"e{i}", i)) for i in range(EVENTS)]
    for i in rng.sample(range(EVENTS - 1), RESENT):
        near = rng.random() < 0.5
        at = rng.uniform(i + 1, min(EVENTS, i + 40) if near else EVENTS)
        placed.append((at, (f"e{i}", i)))
    return [event for _, event in sorted(placed)]


def produce(
    bootstrap: str, topic: str, events: list[tuple[str, int]], rng: random.Random
) -> list[Produced]:
    """Each event as JSON to a seeded partition; its coordinates from the delivery report.
    Idempotent: the producer's own retries add no record, so the reports are the topic."""
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    delivered: dict[int, Produced] = {}
    failures: list[str] = []
    for i, (event_id, n) in enumerate(events):

        def report(error: Any, msg: Any, i: int = i, event_id: str = event_id, n: int = n) -> None:
            if error is not None:
                failures.append(str(error))
                return
            delivered[i] = Produced(event_id, n, msg.partition(), msg.offset())

        value = json.dumps({"event_id": event_id, "n": n})
        partition = rng.randrange(PARTITIONS)
        while True:
            try:
                producer.produce(topic, value=value, partition=partition, on_delivery=report)
                break
            except BufferError:
                producer.poll(0.1)
        producer.poll(0)
    assert producer.flush(60) == 0 and not failures, failures[:3]
    assert len(delivered) == len(events)
    return [delivered[i] for i in range(len(events))]


def topic_size(bootstrap: str, topic: str) -> int:
    """Records in the topic from offset 0 (its watermarks)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"size-{uuid.uuid4()}"})
    try:
        total = 0
        for p in range(PARTITIONS):
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
            assert low == 0, f"partition {p} starts at {low}"
            total += high
        return total
    finally:
        consumer.close()


@pytest.fixture(scope="module")
def source_topic(services: dict[str, str], bootstrap: str) -> SourceTopic:
    """The module's source topic, produced once, read by every cell's own query."""
    name = f"ksrc-{uuid.uuid4().hex[:10]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, PARTITIONS, -1)])[name].result(timeout=30)
    rng = random.Random(INPUT_SEED)
    records = produce(bootstrap, name, plan_events(rng), rng)
    assert topic_size(bootstrap, name) == len(records) == EVENTS + RESENT
    assert len({(r.partition, r.offset) for r in records}) == len(records)
    # Our hashlib twin of the ID Spark computes, checked against the library's Python one.
    for r in records:
        assert source_id(name, r.partition, r.offset) == record_id([name, r.partition, r.offset])
    return SourceTopic(name, tuple(records))


# -- the runs ----------------------------------------------------------------------------


@dataclass
class RunJob(Job):
    """tests/crash/harness.py's Job, running ``exactlyonce run <pipeline>`` (its checkpoint
    is the harness's, ``<workdir>/checkpoint``)."""

    pipeline: Path = Path()
    final_pipeline: Path = Path()  # the last run's: the same with bigger epochs

    def command(self) -> list[str]:
        pipeline = self.final_pipeline if self.final_run else self.pipeline
        return [sys.executable, "-m", "exactlyonce.integration.cli", "run", str(pipeline)]

    def sink_env(self) -> dict[str, str]:
        return {}


def kill_schedule(job: RunJob, seed: int, more_points: tuple[str, ...] = ()) -> None:
    """A random kill, a kill at ``NAMED_POINT`` of a fresh epoch (then at each of
    ``more_points``), two more random kills; each run restarts on the same checkpoint. Every
    scheduled kill must happen."""
    rng = random.Random(seed)
    job.kill_randomly(rng, seed, runs=1, max_delay=MAX_DELAY_S, timeout=RUN_TIMEOUT_S)
    named = []
    for point in (NAMED_POINT, *more_points):
        # Two past Spark's last commit: an epoch the run writes fresh (after a kill the head
        # may be one past Spark's log; that epoch is skipped whole, never reaching a point).
        named.append((point, max(job.spark_commits(), default=-1) + 2))
        job.kill_at_points(named[-1:], timeout=RUN_TIMEOUT_S)
    job.kill_randomly(
        rng, seed, runs=RANDOM_KILLS - 1, max_delay=MAX_DELAY_S, timeout=RUN_TIMEOUT_S, first=2
    )
    job.run_to_end(timeout=RUN_TIMEOUT_S)
    random_kills = [f"random kill {n} (seed {seed})" for n in range(1, RANDOM_KILLS + 1)]
    at_points = [f"{point}@{epoch}" for point, epoch in named]
    assert job.kills == [random_kills[0], *at_points, *random_kills[1:]], job.kills


# -- what each sink holds, read with plain clients ---------------------------------------


@dataclass(frozen=True)
class Found:
    """One record as the sink holds it: its record ID, the columns it carries, and how many
    writes made it (a row, a message, a stream entry: one; a document: its ``_version``)."""

    record_id: str
    event_id: str
    topic: str
    partition: int
    offset: int
    writes: int = 1


@dataclass(frozen=True)
class Cell:
    """One sink's section of the pipeline file, its plain reader, and a plain writer of a
    second copy of a record (the negative control: the audit must then fail)."""

    sink: str
    read: Callable[[], list[Found]]
    write_again: Callable[[Found], None]
    # Elasticsearch's op_type index: a re-sent record overwrites its own copy (see below)
    rewrites_resent: bool = False


def postgres_sink(name: str) -> str:
    return f"  type: postgres\n  dsn: ${{EXACTLYONCE_PG_DSN}}\n  table: {name}\n  mode: append\n"


def read_postgres(dsn: str, table: str) -> list[Found]:
    """Every row (append mode: a second write is a second row), with psycopg."""
    query = f'SELECT record_id::text, event_id, topic, "partition", "offset" FROM "{table}"'
    with psycopg.connect(dsn) as conn:
        rows = conn.execute(query).fetchall()
    return [Found(str(uuid.UUID(r[0]).hex), r[1], r[2], int(r[3]), int(r[4])) for r in rows]


def insert_again(dsn: str, table: str, record: Found) -> None:
    query = f'INSERT INTO "{table}" SELECT * FROM "{table}" WHERE record_id = %s LIMIT 1'
    with psycopg.connect(dsn) as conn:
        conn.execute(query, (str(uuid.UUID(record.record_id)),))


def kafka_sink(name: str) -> str:
    return (
        "  type: kafka\n"
        "  bootstrap_servers: ${KAFKA_BOOTSTRAP_SERVERS}\n"
        f"  topic: {name}\n"
        "  create_topic: true\n"
        "  partitions: 2\n"
    )


def read_kafka(bootstrap: str, topic: str) -> list[Found]:
    """Every record of every partition, from offset 0 to the end (for read_committed: the
    last stable offset), with a plain confluent-kafka consumer: isolation.level
    read_committed, assign(), no group offsets, no recipe. The ID is the record's
    ``eo-record-id`` header, the columns its JSON value."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"audit-{uuid.uuid4()}",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
        }
    )
    try:
        partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
        consumer.assign([TopicPartition(topic, p, 0) for p in partitions])
        found: list[Found] = []
        at_end: set[int] = set()
        while len(at_end) < len(partitions):
            for msg in consumer.consume(num_messages=5000, timeout=1.0):
                error = msg.error()
                if error is not None and error.code() == KafkaError._PARTITION_EOF:
                    at_end.add(msg.partition())
                    continue
                assert error is None, error
                at_end.discard(msg.partition())
                headers = named_headers(msg.headers())
                value = json.loads(msg.value())
                found.append(
                    Found(
                        headers["eo-record-id"].decode(),
                        value["event_id"],
                        value["topic"],
                        int(value["partition"]),
                        int(value["offset"]),
                    )
                )
        return found
    finally:
        consumer.close()


def produce_again(bootstrap: str, topic: str, record: Found) -> None:
    producer = Producer({"bootstrap.servers": bootstrap})
    producer.produce(
        topic,
        value=json.dumps(as_columns(record)),
        headers=[("eo-record-id", record.record_id.encode())],
    )
    assert producer.flush(30) == 0


def as_columns(record: Found) -> dict[str, Any]:
    return {
        "event_id": record.event_id,
        "topic": record.topic,
        "partition": record.partition,
        "offset": record.offset,
    }


def redis_sink(name: str) -> str:
    return (
        "  type: redis\n"
        "  url: ${EXACTLYONCE_SINK_REDIS_URL}\n"
        f"  key_template: {name}:events\n"
        "  write: stream\n"
    )


def read_redis(server: SinkRedis, stream: str) -> list[Found]:
    """Every entry of the stream (a second write is a second entry), with redis-py's
    XRANGE over the whole stream."""
    client = redis.Redis(host="127.0.0.1", port=server.port, password=server.password)
    try:
        entries = client.xrange(stream, "-", "+")
    finally:
        client.close()
    found = []
    for _entry_id, raw in entries:
        f = {k.decode(): v.decode() for k, v in raw.items()}
        found.append(
            Found(f["record_id"], f["event_id"], f["topic"], int(f["partition"]), int(f["offset"]))
        )
    return found


def append_again(server: SinkRedis, stream: str, record: Found) -> None:
    client = redis.Redis(host="127.0.0.1", port=server.port, password=server.password)
    try:
        client.xadd(stream, {"record_id": record.record_id, **as_columns(record)})
    finally:
        client.close()


def elasticsearch_sink(url: str, index: str) -> str:
    return f"  type: elasticsearch\n  hosts: [{url}]\n  index: {index}\n  op_type: index\n"


def es_call(url: str, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(
        url + path, data=data, method=method, headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=60) as response:
        return json.loads(response.read())


def read_elasticsearch(url: str, index: str) -> list[Found]:
    """Every document with its ``_version`` (every successful write of an ``_id`` bumps it),
    by raw HTTP: ``_refresh``, then a scrolled ``_search``."""
    es_call(url, "POST", f"/{index}/_refresh")
    page = es_call(url, "POST", f"/{index}/_search?scroll=1m", {"size": 1000, "version": True})
    hits: list[dict[str, Any]] = []
    while page["hits"]["hits"]:
        hits.extend(page["hits"]["hits"])
        page = es_call(
            url, "POST", "/_search/scroll", {"scroll": "1m", "scroll_id": page["_scroll_id"]}
        )
    es_call(url, "DELETE", "/_search/scroll", {"scroll_id": [page["_scroll_id"]]})
    return [
        Found(
            h["_id"],
            h["_source"]["event_id"],
            h["_source"]["topic"],
            int(h["_source"]["partition"]),
            int(h["_source"]["offset"]),
            writes=int(h["_version"]),
        )
        for h in hits
    ]


def index_again(url: str, index: str, record: Found) -> None:
    es_call(url, "PUT", f"/{index}/_doc/{record.record_id}", as_columns(record))


# -- the audit ---------------------------------------------------------------------------


def audit(found: list[Found], topic: SourceTopic, identity: str) -> None:
    """Each expected record held once, nothing else; every record's ID is the one its own
    columns make; per event, as many records as the identity mode keeps. (Writes beyond
    one per held record: :func:`rewritten`.)"""
    expected, per_event = topic.expected(identity)
    counts = Counter(f.record_id for f in found)
    duplicates = {i: n for i, n in counts.items() if n > 1}
    missing = expected - set(counts)
    unexpected = set(counts) - expected
    print(
        f"audit ({identity}): {len(found)} records, {len(counts)} IDs, {len(expected)} "
        f"expected; {len(duplicates)} duplicated, {len(missing)} missing, "
        f"{len(unexpected)} unexpected; {len(rewritten(found))} rewritten"
    )
    assert not duplicates, (
        f"{len(duplicates)} IDs held more than once: {list(duplicates.items())[:5]}"
    )
    assert not missing, f"{len(missing)} expected IDs missing: {sorted(missing)[:5]}"
    assert not unexpected, f"{len(unexpected)} unexpected IDs: {sorted(unexpected)[:5]}"
    coordinates = {(r.partition, r.offset): r for r in topic.records}
    for f in found:
        if identity == "source":
            assert f.record_id == source_id(f.topic, f.partition, f.offset), f
        else:
            assert f.record_id == record_id([f.event_id]), f
        assert f.topic == topic.name and coordinates[(f.partition, f.offset)].event_id == f.event_id
    assert Counter(f.event_id for f in found) == per_event


def rewritten(found: list[Found]) -> dict[str, int]:
    """Records held once but written more than once (a document's ``_version`` above 1)."""
    return {f.record_id: f.writes for f in found if f.writes > 1}


def assert_exactly_once(found: list[Found], topic: SourceTopic, identity: str) -> None:
    audit(found, topic, identity)
    twice = rewritten(found)
    assert not twice, f"{len(twice)} records written more than once: {list(twice.items())[:5]}"


def product_audit(pipeline: Path, keys: list[list[Any]]) -> dict[str, Any]:
    """``exactlyonce audit --json`` of the pipeline against these keys: the product's own
    reading, next to ours."""
    expected = pipeline.with_name("expected-ids.txt")
    expected.write_text("".join(json.dumps(k) + "\n" for k in keys))
    done = subprocess.run(
        [sys.executable, "-m", "exactlyonce.integration.cli", "audit", str(pipeline)]
        + ["--expected-ids", str(expected), "--json"],
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
    )
    assert done.returncode in (0, 1), done.stderr[-3000:]
    report: dict[str, Any] = json.loads(done.stdout)
    return report


def writes_of(found: list[Found], rid: str) -> int:
    return sum(f.writes for f in found if f.record_id == rid)


# -- the cells ---------------------------------------------------------------------------

SINKS = [
    pytest.param("postgres", marks=pytest.mark.postgres),
    pytest.param("kafka"),  # the file's name puts the kafka marker on every cell
    pytest.param("redis", marks=pytest.mark.redis),
    pytest.param("elasticsearch", marks=pytest.mark.elasticsearch),
]


@pytest.fixture
def cell(
    request: pytest.FixtureRequest,
    unique_name: str,
    services: dict[str, str],
    monkeypatch: pytest.MonkeyPatch,
) -> Cell:
    """The sink section of the pipeline file and the plain reader of what it wrote."""
    sink: str = request.param
    name = unique_name
    if sink == "postgres":
        dsn = services["EXACTLYONCE_PG_DSN"]
        return Cell(
            postgres_sink(name),
            lambda: read_postgres(dsn, name),
            lambda record: insert_again(dsn, name, record),
        )
    if sink == "kafka":
        bootstrap = services["KAFKA_BOOTSTRAP_SERVERS"]
        return Cell(
            kafka_sink(name),
            lambda: read_kafka(bootstrap, name),
            lambda record: produce_again(bootstrap, name, record),
        )
    if sink == "redis":
        server: SinkRedis = request.getfixturevalue("sink_redis")
        # In the environment: the runs read it there, the harness looks for its password in
        # their logs.
        monkeypatch.setenv("EXACTLYONCE_SINK_REDIS_URL", server.url)
        stream = f"{name}:events"
        return Cell(
            redis_sink(name),
            lambda: read_redis(server, stream),
            lambda record: append_again(server, stream, record),
        )
    assert sink == "elasticsearch", sink
    es: EsHandle = request.getfixturevalue("es")
    index = name.replace("_", "-")
    return Cell(
        elasticsearch_sink(es.url, index),
        lambda: read_elasticsearch(es.url, index),
        lambda record: index_again(es.url, index, record),
        rewrites_resent=True,
    )


@pytest.mark.parametrize("identity", ["source", "columns"])
@pytest.mark.parametrize("cell", SINKS, indirect=True)
def test_kafka_source_killed_runs_end_exactly_once(
    cell: Cell,
    identity: str,
    tmp_path: Path,
    source_topic: SourceTopic,
    unique_name: str,
) -> None:
    seed = crash_seed("kafka source kill schedule")
    pipeline, final = tmp_path / "pipeline.yaml", tmp_path / "pipeline-final.yaml"
    job = RunJob(tmp_path, unique_name, dsn="", pipeline=pipeline, final_pipeline=final)
    for path, per_epoch in ((pipeline, 1), (final, FINAL_FILES_PER_TRIGGER)):
        path.write_text(
            PIPELINE.format(
                name=unique_name,
                checkpoint=job.checkpoint,
                topic=source_topic.name,
                max_offsets=MAX_OFFSETS_PER_TRIGGER * per_epoch,
                sink=cell.sink,
                identity=IDENTITIES[identity],
                event_log=event_log_conf(tmp_path / "event-log")["spark.eventLog.dir"],
            )
        )
    more_points = ("mid_bulk",) if cell.rewrites_resent and identity == "columns" else ()
    try:
        kill_schedule(job, seed, more_points)
    finally:
        job.stop_if_running()
    print(f"kills: {job.kills}; {job.last_commit() + 1} epochs committed")
    found = cell.read()
    audit(found, source_topic, identity)
    keys = source_topic.keys(identity)
    report = product_audit(pipeline, keys)
    verdict = {k: report[k] for k in ("ok", "read", "duplicates", "missing", "unexpected")}
    assert verdict == {
        "ok": True,
        "read": len(keys),
        "duplicates": 0,
        "missing": 0,
        "unexpected": 0,
    }
    assert report["rewritten"] == len(rewritten(found)), report

    # The negative control: a record written a second time by a plain client must show in
    # the same reading and fail the same audit (a reader blind to it would prove nothing).
    again = next(f for f in found if f.writes == 1)
    cell.write_again(again)
    after = cell.read()
    assert writes_of(after, again.record_id) == 2
    with pytest.raises(AssertionError, match="more than once"):
        assert_exactly_once(after, source_topic, identity)

    twice = rewritten(found)
    if cell.rewrites_resent:  # idempotent by _id, then the shard commit: at most a re-send a kill
        bound = 1 + len(job.kills)
        print(
            f"re-sent (idempotent) documents: {len(twice)}, _versions {sorted(set(twice.values()))}"
        )
        assert all(v <= bound for v in twice.values()), f"more writes than re-runs: {twice}"
    else:
        assert not twice, f"{len(twice)} records written more than once: {list(twice.items())[:5]}"
