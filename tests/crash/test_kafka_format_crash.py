"""kill -9 a real PySpark job writing Kafka through format("exactlyonce"); restart; audit.

The job reads two input files per epoch, each its own Spark partition, with duplicates within
a file, across the two files of an epoch and across epochs (tests/crash/harness.py): two tasks
of one epoch hold the same IDs, and their claims decide which one appends each. One job is
killed at each named point in turn (each run resumes the previous one's checkpoint), then
runs to its end. The audit is by plain read_committed consumers (kafka-python and librdkafka,
no recipe) on genuine Apache Kafka: every record of the query counted per ``eo-record-id``,
each expected ID exactly once, none missing, none unexpected (a record without an ID is
unexpected); the dead letters once each; and the recipe's count agrees.

(A re-run split differently is refused: tests/integration/test_datasource_kafka.py.)
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.crash.test_kafka_crash import prepare, verify

pytestmark = [pytest.mark.crash, pytest.mark.integration]

FORMAT_ARGS = ("--api", "format", "--max-files-per-trigger", "2")
# Inside the task: mid_produce (its transaction open, part of its records on the broker),
# after_shard_commit (committed and confirmed, its IDs not marked in the catalog); in the
# driver's commit: before_head (every task committed, the head not moved).
SCHEDULE = [
    ("mid_produce", 1),
    ("after_shard_commit", 2),
    ("before_head", 3),
]


def test_format_api_kill_at_each_named_point(
    tmp_path: Path, services: dict[str, str], unique_name: str
) -> None:
    job, data, sink = prepare(tmp_path, services, unique_name, files=10)
    job.extra_args = FORMAT_ARGS
    job.kill_at_points(SCHEDULE)
    job.run_to_end()
    assert job.kills == [f"{point}@{epoch}" for point, epoch in SCHEDULE]
    verify(job, data, sink)
