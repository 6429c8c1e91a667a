"""Spark Real-time Mode into Kafka, Redis and OpenSearch, SIGKILLed: exactly once by source
frontiers.

The job (tests/crash/realtime_job.py ``--sink kafka|redis|opensearch``: a Kafka topic of 2
partitions -> ``trigger(realTime="5 seconds")`` -> ``sink.realtime()``, fed by ``mapInArrow``
(the random kills) or ``foreach`` (the named points) -> another Kafka topic, a Redis stream, or
an index of a genuine OpenSearch node) runs as a separate process while a producer sends
events; its whole session (driver, JVM, Python workers) is SIGKILLed several times, each run
restarted from its checkpoint, then run until every event is in. Kills are aimed: a run is
killed at a seeded random moment shortly after its records reached the output, so they land
inside an epoch Spark has not committed, whose records Spark then reads again. The audit reads
the output with a client the sink does not use: kafka-python as a plain ``read_committed``
consumer, ``redis-cli XRANGE`` (a second write is a second entry), or plain HTTP counting the
documents per event (a second write under another ``_id`` is a second document): every event
exactly once.

Negative control: the same schedule against a plain foreach writer (an idempotent, non-
transactional producer; a plain XADD per row; an index request per row whose ``_id`` the engine
picks, es-hadoop's default) must show duplicates. (PostgreSQL's cells:
tests/crash/test_realtime_postgres_crash.py.)
"""

from __future__ import annotations

import random
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import pytest

from exactlyonce.connectors import KafkaSink, RedisSink
from exactlyonce.connectors.opensearch import OpenSearchSink
from tests.crash.harness import crash_seed
from tests.support import opensearch_http as http
from tests.support.kafka_audit import field_counts
from tests.support.realtime import EventProducer, RealtimeJob, end_offsets, make_topic
from tests.support.redis_fixtures import SinkRedis

pytestmark = pytest.mark.crash

# At most EVENTS (3 minutes' worth; the OpenSearch audit reads one page of 10,000): the
# producer stops once the kills are done, so the stream outlives them however slowly runs start.
EVENTS = 9_000
RATE = 50.0  # events per second
KILLS = 3


@dataclass
class Output:
    """Where a job writes, and how the audit reads it (clients the sink does not use)."""

    sink: str
    name: str
    bootstrap: str
    redis: SinkRedis
    search_url: str = ""

    @property
    def stream_key(self) -> str:
        return f"{self.name}:events"

    def make(self, plain: bool) -> None:
        """The output (the sink's writer makes its own; the control's is made here)."""
        if self.sink == "kafka":
            if plain:
                make_topic(self.bootstrap, self.name)
            else:
                self.kafka_sink(create=True)

    def kafka_sink(self, create: bool = False) -> KafkaSink:
        """The sink's view of the output topic (created with the source's 2 partitions)."""
        return KafkaSink(
            self.bootstrap, self.name, None, self.name, id_from="content",
            create_topic=create, partitions=2 if create else None,
        )  # fmt: skip

    def written(self) -> int:
        """How much the output holds (offsets with markers, entries, or documents)."""
        if self.sink == "kafka":
            return sum(end_offsets(self.bootstrap, self.name).values())
        if self.sink == "opensearch":
            return len(http.docs(self.search_url, self.name))
        return int(self.redis.cli_raw("XLEN", self.stream_key)[0])

    def counts(self) -> Counter[str]:
        if self.sink == "kafka":
            return field_counts(self.bootstrap, self.name)
        if self.sink == "opensearch":
            found = http.docs(self.search_url, self.name).values()
            return Counter(str(doc["event_id"]) for doc in found)
        lines = self.redis.cli_raw("XRANGE", self.stream_key, "-", "+")
        return Counter(lines[i + 1] for i, line in enumerate(lines[:-1]) if line == "event_id")

    def frontiers(self) -> dict[tuple[str, int], int]:
        if self.sink == "kafka":
            return self.kafka_sink().source_frontiers()
        if self.sink == "opensearch":
            search = OpenSearchSink(self.search_url, self.name, None, query_name=self.name,
                                    id_from="content")  # fmt: skip
            return search.source_frontiers()
        sink = RedisSink(
            self.redis.url, self.stream_key, None, self.name, id_from="content", write="stream"
        )
        return sink.source_frontiers()


def kill_after_written_records(job: RealtimeJob, out: Output, rng: random.Random, why: str) -> None:
    """Start a run; once the output grew under it, SIGKILL it within 1.5 s."""
    before = out.written()
    job.start()
    job._wait(lambda: out.written() > before, 120, "records of this run")
    time.sleep(rng.uniform(0.0, 1.5))
    assert job.proc is not None and job.proc.poll() is None, f"run {job.runs} ended before {why}"
    job.kill(why)


def killed_runs(job: RealtimeJob, out: Output, seed: int) -> tuple[EventProducer, Counter[str]]:
    """The kill schedule, then a last run until every event is in; the producer and the
    output's events as the independent reader counts them."""
    rng = random.Random(seed)
    producer = EventProducer(out.bootstrap, job.topic, EVENTS, RATE).start()
    for n in range(KILLS):
        kill_after_written_records(job, out, rng, f"kill {n + 1} (seed {seed})")
    producer.finish()  # the stream outlived every kill, however long the runs took to start
    job.start()
    job.wait_started()
    events = producer.events
    job._wait(lambda: len(out.counts()) >= events, 120, f"{events} events")
    time.sleep(1.0)  # let a late duplicate of the negative control land
    job.stop()
    return producer, out.counts()


def run_job(
    sink: str,
    writer: str,
    bootstrap: str,
    sink_redis: SinkRedis,
    name: str,
    tmp_path: Path,
    request: pytest.FixtureRequest,
) -> tuple[Output, RealtimeJob, EventProducer, Counter[str]]:
    seed = crash_seed(f"real-time mode {sink} {writer} kill schedule")
    make_topic(bootstrap, name)
    search_url = request.getfixturevalue("opensearch").url if sink == "opensearch" else ""
    out = Output(sink, f"{name}-out".replace("_", "-"), bootstrap, sink_redis, search_url)
    out.make(plain=writer == "plain")
    env = {"SINK_REDIS_URL": sink_redis.url, "OPENSEARCH_URL": search_url}
    # The frontier writer gets its rows by mapInArrow here (the default transport), by
    # foreach in the named-point test below; the plain writers are foreach writers.
    transport = "arrow" if writer == "frontier" else "foreach"
    job = RealtimeJob(tmp_path, out.name, "", topic=name, sink=sink, writer=writer, env=env,
                      transport=transport)  # fmt: skip
    try:
        producer, counts = killed_runs(job, out, seed)
    finally:
        job.stop_if_running()
    assert len([k for k in job.kills if k.startswith("kill ")]) == KILLS
    return out, job, producer, counts


SINKS = ["kafka", "redis", "opensearch"]


@pytest.mark.parametrize("sink", SINKS)
def test_realtime_writer_killed_three_times_writes_each_event_once(
    sink: str,
    bootstrap: str,
    sink_redis: SinkRedis,
    unique_name: str,
    tmp_path: Path,
    request: pytest.FixtureRequest,
) -> None:
    out, _, producer, counts = run_job(
        sink, "frontier", bootstrap, sink_redis, unique_name, tmp_path, request
    )
    assert sorted(producer.expected - set(counts)) == [], "events missing"
    assert {e: n for e, n in counts.items() if n != 1} == {}, "events written twice"
    assert set(counts) == producer.expected
    ends = end_offsets(bootstrap, unique_name)
    assert out.frontiers() == {(unique_name, p): n for p, n in ends.items()}


@pytest.mark.parametrize("sink", SINKS)
def test_negative_control_a_plain_foreach_writer_duplicates_under_the_same_kills(
    sink: str,
    bootstrap: str,
    sink_redis: SinkRedis,
    unique_name: str,
    tmp_path: Path,
    request: pytest.FixtureRequest,
) -> None:
    _, _, producer, counts = run_job(
        sink, "plain", bootstrap, sink_redis, unique_name, tmp_path, request
    )
    duplicates = sum(n - 1 for n in counts.values())
    print(f"negative control ({sink}): {duplicates} duplicates over {len(counts)} events")
    assert set(counts) == producer.expected  # at-least-once: nothing missing
    assert duplicates > 0, "the audit cannot see duplicates: it proves nothing"


# Real-time Mode's named points (exactlyonce.faults), one run killed at each in turn: inside an
# epoch before a chunk's commit, after one, and at the epoch's end after its last chunk, each
# before Spark commits the epoch (so Spark runs it again).
POINTS = [("rtm_before_chunk", 1), ("rtm_after_chunk", 2), ("rtm_epoch_end", 3)]


@pytest.mark.parametrize("sink", SINKS)
def test_realtime_writer_killed_at_each_named_point_writes_each_event_once(
    sink: str,
    bootstrap: str,
    sink_redis: SinkRedis,
    unique_name: str,
    tmp_path: Path,
    request: pytest.FixtureRequest,
) -> None:
    make_topic(bootstrap, unique_name)
    search_url = request.getfixturevalue("opensearch").url if sink == "opensearch" else ""
    out = Output(sink, f"{unique_name}-out".replace("_", "-"), bootstrap, sink_redis, search_url)
    out.make(plain=False)
    env = {"SINK_REDIS_URL": sink_redis.url, "OPENSEARCH_URL": search_url}
    job = RealtimeJob(tmp_path, out.name, "", topic=unique_name, sink=sink, env=env)
    producer = EventProducer(bootstrap, unique_name, EVENTS, RATE).start()
    try:
        job.kill_at_points(POINTS)
        producer.finish()
        job.start()
        job.wait_started()
        events = producer.events
        job._wait(lambda: len(out.counts()) >= events, 120, f"{events} events")
        job.stop()
    finally:
        producer.done.set()
        job.stop_if_running()
    assert job.kills == [f"{point}@{epoch}" for point, epoch in POINTS]
    counts = out.counts()
    assert sorted(producer.expected - set(counts)) == [], "events missing"
    assert {e: n for e, n in counts.items() if n != 1} == {}, "events written twice"
    ends = end_offsets(bootstrap, unique_name)
    assert out.frontiers() == {(unique_name, p): n for p, n in ends.items()}
