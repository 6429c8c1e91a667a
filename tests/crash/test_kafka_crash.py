"""kill -9 a real PySpark job writing through KafkaSink at every named point; restart; audit.

On genuine Apache Kafka (the default broker; the sink's preflight must measure that it hides
aborted records), two checks after the last run:

- plain ``isolation.level=read_committed`` consumers, one on kafka-python and one on
  confluent-kafka (librdkafka), no recipe: every record read, counted per ``eo-record-id``
  header, must number exactly one, with no ID missing; the dead letters once each;
- the consumption recipe, implemented independently with kafka-python
  (tests/support/kafka_audit.py): per record ID, the records of confirmed attempts number
  exactly one.

Tansu, which delivers aborted records, is not used here: the recipe's own tests on it are in
tests/integration (test_kafka_offsets.py, the abandoned-control-topic tests).
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import pytest

from exactlyonce.connectors.kafka import KafkaSink
from tests.crash.harness import Input, Job, crash_seed, make_input
from tests.support.kafka_audit import (
    PLAIN_CLIENTS,
    KafkaAudit,
    assert_plain_exactly_once,
    audit,
    plain_counts,
)

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
    return prepare_on(tmp_path, services["KAFKA_BOOTSTRAP_SERVERS"], name, data)


def prepare_on(
    tmp_path: Path, bootstrap: str, name: str, data: Input
) -> tuple[KafkaJob, Input, KafkaSink]:
    """The job for ``data`` on the broker at ``bootstrap``, and a sink like the job's."""
    # Creates the topic (3 partitions) and measures the broker, as the job's sink will.
    sink = KafkaSink(bootstrap, name, ["event_id"], name, create_topic=True, partitions=3)
    assert sink.hides_aborted is True, "genuine Apache Kafka hides aborted records"
    job = KafkaJob(tmp_path, name, dsn="", bootstrap=bootstrap)
    return job, data, sink


def verify(job: KafkaJob, data: Input, sink: KafkaSink) -> KafkaAudit:
    """Plain read_committed consumers on both clients see every ID exactly once, and each
    dead letter once; so does the recipe; the sink head is Spark's last commit."""
    assert sink.hides_aborted is True
    assert_plain_exactly_once(job.bootstrap, job.table, job.table, data.expected_ids)
    for client in PLAIN_CLIENTS:
        letters = plain_counts(job.bootstrap, sink.dead_letter_topic, job.table, client)
        assert sum(letters.values()) == data.null_keys, f"{client}: dead letters {letters}"
    result = audit(job.bootstrap, job.table, job.table, read_committed=True)
    result.assert_exactly_once(data.expected_ids)
    assert result.naive_extra == 0, f"kafka-python read_committed saw {result.naive_extra} extra"
    letters_audit = audit(
        job.bootstrap,
        sink.dead_letter_topic,
        job.table,
        sink=sink.sink_name,
        count_field="dead_letters",
        read_committed=True,
    )
    assert sum(letters_audit.accepted.values()) == data.null_keys, "each null key once"
    last_commit = job.last_commit()
    assert result.head is not None and result.head["epoch"] == last_commit, (
        "the sink head is Spark's last committed epoch"
    )
    return result


# One run per named point, each killed at its own epoch: five JVM starts in one schedule instead
# of two per point (the machine is small and shared). No before_write: that point is the
# driver's shared protocol (exactlyonce/connectors/base/sink.py, run_epoch) before any write of
# the epoch, the same for every sink; PostgreSQL's test and make soak kill there. A kill after
# Spark's commit (a plain restart at the head) is PostgreSQL's test's too.
SCHEDULE = [
    ("mid_produce", 1),  # a task, first chunk on the broker inside the open transaction
    ("before_confirm", 2),  # a task, transaction committed, confirmation not yet written
    ("after_shard_commit", 3),  # a task, committed and confirmed, catalog not yet marked
    ("after_head", 4),  # driver, head advanced, Spark's commit log not yet written
]
FILES = 7


def test_kill_at_every_named_point(
    tmp_path: Path, services: dict[str, str], unique_name: str
) -> None:
    job, data, sink = prepare(tmp_path, services, unique_name, files=FILES)
    job.kill_at_points(SCHEDULE)
    job.run_to_end()
    assert job.kills == [f"{point}@{epoch}" for point, epoch in SCHEDULE]
    verify(job, data, sink)


def test_seeded_random_kills(tmp_path: Path, services: dict[str, str], unique_name: str) -> None:
    seed = crash_seed()
    job, data, sink = prepare(tmp_path, services, unique_name, files=12, seed=seed)
    job.kill_randomly(random.Random(seed), seed, runs=3, max_delay=2.0)
    job.run_to_end()
    assert len(job.kills) == 3, f"kills: {job.kills} (seed {seed})"
    verify(job, data, sink)
