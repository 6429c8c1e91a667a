"""kill -9 a real PySpark job writing Kafka through format("exactlyonce"); restart; audit.

The job reads two input files per epoch, each its own Spark partition, with duplicates within
a file, across the two files of an epoch and across epochs (tests/crash/harness.py): two tasks
of one epoch hold the same IDs, and their claims decide which one appends each. One job is
killed at each named point in turn (each run resumes the previous one's checkpoint; after the
kill between a commit and its marks, the catalog is lost as well), then runs to its end. The
audit is by plain read_committed consumers (kafka-python and librdkafka, no recipe) on genuine
Apache Kafka: every record of the query counted per ``eo-record-id``, each expected ID exactly
once, none missing, none unexpected (a record without an ID is unexpected); the dead letters
once each; and the recipe's count agrees.

(A re-run split differently is refused: tests/integration/test_datasource_kafka.py.)
"""

from __future__ import annotations

from pathlib import Path

import pytest

from exactlyonce.connectors.kafka import KafkaSink
from exactlyonce.dedup.catalog import DedupConfig, RedisCatalog
from tests.crash.test_kafka_crash import prepare, verify

pytestmark = [pytest.mark.crash, pytest.mark.integration]

FORMAT_ARGS = ("--api", "format", "--max-files-per-trigger", "2")
# Inside the task: mid_produce (its transaction open, part of its records on the broker),
# before_confirm (committed, neither confirmed nor marked in the catalog; then the catalog is
# lost too: the restart rebuilds it from the topic, trusting the committed marker, and the
# claims are gone); in the driver's commit: before_head (every task committed and marked,
# the head not moved: the restart rolls the marks back and marks them again from the topic).
SCHEDULE = [
    ("mid_produce", 1),
    ("before_confirm", 2),
    ("before_head", 3),
]


def test_format_api_kill_at_each_named_point(
    tmp_path: Path, services: dict[str, str], unique_name: str
) -> None:
    job, data, sink = prepare(tmp_path, services, unique_name, files=10)
    job.extra_args = FORMAT_ARGS
    for point, epoch in SCHEDULE:
        job.kill_at_points([(point, epoch)])
        if point == "before_confirm":
            lose_the_catalog(services, sink)
    job.run_to_end()
    assert job.kills == [f"{point}@{epoch}" for point, epoch in SCHEDULE]
    verify(job, data, sink)


def lose_the_catalog(services: dict[str, str], sink: KafkaSink) -> None:
    """Every key of the sink's catalog deleted: its IDs, filters, claims and registry."""
    config = DedupConfig(services["EXACTLYONCE_REDIS_URL"])
    catalog = RedisCatalog(config, sink.query_name, sink.sink_name)
    try:
        assert catalog.drop() > 0, "the catalog existed"
    finally:
        catalog.close()
