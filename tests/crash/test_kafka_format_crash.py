"""kill -9 a real PySpark job writing Kafka through format("exactlyonce"); restart; audit.

The job reads two input files per epoch, each its own Spark partition, with duplicates within
a file, across the two files of an epoch and across epochs (tests/crash/harness.py): two tasks
of one epoch hold the same IDs, and their claims decide which one appends each. One job is
killed at each named point in turn (each run resumes the previous one's checkpoint), then
runs to its end. The audit is by plain read_committed consumers (kafka-python and librdkafka,
no recipe) on genuine Apache Kafka: every record of the query counted per ``eo-record-id``,
each expected ID exactly once, none missing, none unexpected (a record without an ID is
unexpected); the dead letters once each; and the recipe's count agrees.

A second test re-runs an epoch whose tasks committed with another number of Spark partitions
(round-robin 2, then 3): it must be refused (EpochSplitError), appending nothing; a run that
splits it as before then continues to the end, exactly once.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.crash.test_kafka_crash import KafkaJob, prepare, verify
from tests.kafka_audit import PLAIN_CLIENTS, plain_counts

pytestmark = [pytest.mark.crash, pytest.mark.integration]

FORMAT_ARGS = ("--api", "format", "--max-files-per-trigger", "2")
# Inside the task: mid_produce (its transaction open, part of its records on the broker),
# before_confirm (committed, not confirmed), after_shard_commit (committed and confirmed,
# its IDs not marked in the catalog); in the driver's commit: before_head.
SCHEDULE = [
    ("mid_produce", 1),
    ("before_confirm", 2),
    ("after_shard_commit", 3),
    ("before_head", 4),
]


def test_format_api_kill_at_each_named_point(
    tmp_path: Path, services: dict[str, str], unique_name: str
) -> None:
    job, data, sink = prepare(tmp_path, services, unique_name, files=12)
    job.extra_args = FORMAT_ARGS
    job.kill_at_points(SCHEDULE)
    job.run_to_end()
    assert job.kills == [f"{point}@{epoch}" for point, epoch in SCHEDULE]
    verify(job, data, sink)


def test_differently_split_rerun_is_refused(
    tmp_path: Path, services: dict[str, str], unique_name: str
) -> None:
    job, data, sink = prepare(tmp_path, services, unique_name, files=4)
    job.extra_args = (*FORMAT_ARGS, "--repartition", "2")
    job.kill_at_points([("before_head", 0)])  # both partitions committed, the head not moved
    written = written_ids(job)
    assert written and max(written.values()) == 1
    job.extra_args = (*FORMAT_ARGS, "--repartition", "3")
    job.start()
    with pytest.raises(AssertionError, match="EpochSplitError"):
        job.finish(timeout=240)
    assert written_ids(job) == written, "the refused re-run appended nothing"
    job.extra_args = (*FORMAT_ARGS, "--repartition", "2")
    job.run_to_end()
    verify(job, data, sink)


def written_ids(job: KafkaJob) -> dict[str, int]:
    """Records per ID as both plain read_committed clients read them (they must agree)."""
    counts = [plain_counts(job.bootstrap, job.table, job.table, c) for c in PLAIN_CLIENTS]
    assert counts[0] == counts[1], "kafka-python and librdkafka read the same records"
    return dict(counts[0])
