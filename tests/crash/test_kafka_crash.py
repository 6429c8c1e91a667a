"""kill -9 a real PySpark job writing through KafkaSink at every named point; restart; audit.

The audit reads the topics back with kafka-python (not librdkafka) and applies the
consumption recipe independently (tests/kafka_audit.py): per record ID, the records of
confirmed attempts must number exactly one, with no ID missing. The naive count (what a plain
read_committed consumer sees) is asserted too: exactly once on a broker that hides aborted
records (Apache Kafka); on one that does not (Tansu), a kill inside an open transaction must
leave extra records that only the recipe filters out, which is why the recipe exists.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import pytest

from exactlyonce.connectors.kafka import KafkaSink
from tests.crash.harness import Input, Job, crash_seed, make_input
from tests.kafka_audit import KafkaAudit, audit

pytestmark = [pytest.mark.crash, pytest.mark.integration]

ROWS = 60


@dataclass
class KafkaJob(Job):
    """The harness's Job, running kafka_job.py against a topic instead of a table."""

    script: ClassVar[Path] = Path(__file__).with_name("kafka_job.py")
    bootstrap: str = ""

    def sink_env(self) -> dict[str, str]:
        return {}

    def sink_args(self) -> list[str]:
        return ["--topic", self.table, "--bootstrap", self.bootstrap]


def prepare(
    tmp_path: Path, services: dict[str, str], name: str, files: int, seed: int = 7
) -> tuple[KafkaJob, Input, KafkaSink]:
    data = make_input(tmp_path / "input", files=files, rows=ROWS, seed=seed)
    bootstrap = services["KAFKA_BOOTSTRAP_SERVERS"]
    # Creates the topic (3 partitions) and measures the broker, as the job's sink will.
    sink = KafkaSink(bootstrap, name, ["event_id"], name, create_topic=True, partitions=3)
    assert sink.hides_aborted is not None
    job = KafkaJob(tmp_path, name, dsn="", bootstrap=bootstrap)
    return job, data, sink


def verify(job: KafkaJob, data: Input, sink: KafkaSink) -> KafkaAudit:
    """The recipe sees every ID once, dead letters included; on Apache Kafka, so does a
    plain read_committed consumer."""
    plain = bool(sink.hides_aborted)
    result = audit(job.bootstrap, job.table, job.table, read_committed=plain)
    result.assert_exactly_once(data.expected_ids)
    letters = audit(
        job.bootstrap,
        sink.dead_letter_topic,
        job.table,
        sink=sink.sink_name,
        count_field="dead_letters",
        read_committed=plain,
    )
    assert sum(letters.accepted.values()) == data.null_keys, "each null key dead-lettered once"
    last_commit = job.last_commit()
    assert result.head is not None and result.head["epoch"] == last_commit, (
        "the sink head is Spark's last committed epoch"
    )
    if sink.hides_aborted:  # Apache Kafka: a plain read_committed consumer is exactly-once
        assert result.naive_extra == 0, f"plain read_committed saw {result.naive_extra} extra"
        assert set(result.naive) == data.expected_ids
    print(
        f"naive read_committed extra records: {result.naive_extra} "
        f"(by epoch: { {e: result.naive_extra_in(e) for e in sorted(result.naive_epochs)} })"
    )
    return result


# One run per named point, each killed at its own epoch, then a kill after Spark's commit:
# seven JVM starts in one schedule instead of two per point (the machine is small and shared).
SCHEDULE = [
    ("before_write", 1),  # driver, head checked, nothing written
    ("mid_produce", 2),  # a task, first chunk on the broker inside the open transaction
    ("before_confirm", 3),  # a task, transaction committed, confirmation not yet written
    ("after_shard_commit", 4),  # a task, committed and confirmed, catalog not yet marked
    ("after_head", 5),  # driver, head advanced, Spark's commit log not yet written
]
AFTER_SPARK_COMMIT = 6
FILES = 9


def test_kill_at_every_named_point(
    tmp_path: Path, services: dict[str, str], unique_name: str
) -> None:
    job, data, sink = prepare(tmp_path, services, unique_name, files=FILES)
    job.kill_at_points(SCHEDULE)
    job.kill_after_commit(AFTER_SPARK_COMMIT)
    job.run_to_end()
    assert len(job.kills) == len(SCHEDULE) + 1
    result = verify(job, data, sink)
    if not sink.hides_aborted:
        # Measured on this broker (the preflight probe): it delivers aborted records to
        # read_committed readers. The attempt killed mid-produce stays visible, and the
        # commit that was never confirmed was written again; only the recipe sees each once.
        assert result.naive_extra_in(2) > 0, "mid_produce: the aborted chunk is not visible?"
        assert result.naive_extra_in(3) > 0, "before_confirm: the shard was not re-written?"


def test_seeded_random_kills(tmp_path: Path, services: dict[str, str], unique_name: str) -> None:
    seed = crash_seed()
    job, data, sink = prepare(tmp_path, services, unique_name, files=8, seed=seed)
    job.kill_randomly(random.Random(seed), seed, runs=3, max_delay=2.0)
    job.run_to_end()
    assert len(job.kills) >= 2, f"only {len(job.kills)} kills happened (seed {seed})"
    verify(job, data, sink)
