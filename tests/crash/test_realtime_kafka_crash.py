"""Spark Real-time Mode into Kafka, SIGKILLed: exactly once by source frontiers.

The job (tests/crash/realtime_job.py ``--sink kafka``: a Kafka topic of 2 partitions ->
``trigger(realTime="5 seconds")`` -> ``foreach(KafkaSink.realtime())`` -> another topic) runs
as a separate process while a producer sends events; its whole session (driver, JVM, Python
workers) is SIGKILLed several times, each run restarted from its checkpoint, then run until
every event is in. Kills are aimed: a run is killed at a seeded random moment shortly after
its records reached the output topic, so they land inside an epoch Spark has not committed,
whose records Spark then reads again. The audit reads the output with kafka-python, a plain
``read_committed`` consumer: every event exactly once.

Negative control: the same schedule against a plain foreach writer that produces each row
with an idempotent, non-transactional producer must show duplicates.
"""

from __future__ import annotations

import random
import time
from collections import Counter
from pathlib import Path

import pytest

from exactlyonce.connectors import KafkaSink
from tests.crash.harness import crash_seed
from tests.support.kafka_audit import field_counts
from tests.support.realtime import EventProducer, RealtimeJob, end_offsets, make_topic

pytestmark = pytest.mark.crash

EVENTS = 3_000
RATE = 100.0  # events per second: the stream outlives the kills
KILLS = 3


def written(bootstrap: str, topic: str) -> int:
    """Offsets the output topic holds (records and transaction markers)."""
    return sum(end_offsets(bootstrap, topic).values())


def kill_after_written_records(
    job: RealtimeJob, bootstrap: str, rng: random.Random, why: str
) -> None:
    """Start a run; once the output topic grew under it, SIGKILL it within 1.5 s."""
    before = written(bootstrap, job.table)
    job.start()
    job._wait(lambda: written(bootstrap, job.table) > before, 120, "records of this run")
    time.sleep(rng.uniform(0.0, 1.5))
    assert job.proc is not None and job.proc.poll() is None, f"run {job.runs} ended before {why}"
    job.kill(why)


def killed_runs(job: RealtimeJob, bootstrap: str, seed: int) -> tuple[EventProducer, Counter[str]]:
    """The kill schedule, then a last run until every event is in; the producer and the
    output's events as a plain read_committed consumer counts them."""
    rng = random.Random(seed)
    producer = EventProducer(bootstrap, job.topic, EVENTS, RATE).start()
    for n in range(KILLS):
        kill_after_written_records(job, bootstrap, rng, f"kill {n + 1} (seed {seed})")
    producer.join()
    job.start()
    job.wait_started()
    job._wait(lambda: len(field_counts(bootstrap, job.table)) >= EVENTS, 120, f"{EVENTS} events")
    time.sleep(1.0)  # let a late duplicate of the negative control land
    job.stop()
    return producer, field_counts(bootstrap, job.table)


def output_topic(bootstrap: str, name: str) -> str:
    """The output topic, made with the sink's control topic (as the writer would)."""
    out = f"{name}-out"
    KafkaSink(bootstrap, out, None, name, id_from="content", create_topic=True, partitions=2)
    return out


def test_realtime_kafka_writer_killed_three_times_writes_each_event_once(
    bootstrap: str, unique_name: str, tmp_path: Path
) -> None:
    seed = crash_seed("real-time mode kafka kill schedule")
    make_topic(bootstrap, unique_name)
    out = output_topic(bootstrap, unique_name)
    job = RealtimeJob(tmp_path, out, "", topic=unique_name, sink="kafka")
    try:
        producer, counts = killed_runs(job, bootstrap, seed)
    finally:
        job.stop_if_running()
    assert len([k for k in job.kills if k.startswith("kill ")]) == KILLS
    assert sorted(producer.expected - set(counts)) == [], "events missing"
    assert {e: n for e, n in counts.items() if n != 1} == {}, "events written twice"
    assert set(counts) == producer.expected
    frontiers = KafkaSink(bootstrap, out, None, out, id_from="content").source_frontiers()
    assert frontiers == {
        (unique_name, p): n for p, n in end_offsets(bootstrap, unique_name).items()
    }


def test_negative_control_plain_foreach_produce_duplicates_under_the_same_kills(
    bootstrap: str, unique_name: str, tmp_path: Path
) -> None:
    seed = crash_seed("real-time mode kafka negative control kill schedule")
    make_topic(bootstrap, unique_name)
    out = f"{unique_name}-out"
    make_topic(bootstrap, out)
    job = RealtimeJob(tmp_path, out, "", topic=unique_name, sink="kafka", writer="plain")
    try:
        producer, counts = killed_runs(job, bootstrap, seed)
    finally:
        job.stop_if_running()
    assert len([k for k in job.kills if k.startswith("kill ")]) == KILLS
    duplicates = sum(n - 1 for n in counts.values())
    print(f"negative control: {duplicates} duplicate records over {len(counts)} events")
    assert set(counts) == producer.expected  # at-least-once: nothing missing
    assert duplicates > 0, "the audit cannot see duplicates: it proves nothing"
