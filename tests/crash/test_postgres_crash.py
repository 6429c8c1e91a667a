"""kill -9 the real PySpark job at every named point of the write path; restart; audit.

The audit counts durable inserts per record ID (an AFTER INSERT trigger), so a double write
is caught even though the table has a unique key.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import psycopg
import pytest

from exactlyonce.connectors import PostgresSink
from tests.audit import assert_exactly_once, install_audit
from tests.crash.harness import Input, Job, crash_seed, make_input

pytestmark = [pytest.mark.crash, pytest.mark.integration]

FILES = 8


def prepare(
    tmp_path: Path,
    pg_dsn: str,
    pg: psycopg.Connection[Any],
    table: str,
    files: int = FILES,
    seed: int = 7,
    mode: str = "insert",
    api: str = "foreachBatch",
) -> tuple[Job, Input]:
    data = make_input(tmp_path / "input", files=files, rows=150, seed=seed)
    from pyspark.sql.types import LongType, StringType, StructField, StructType

    schema = StructType(
        [
            StructField("event_id", StringType()),
            StructField("amount", LongType()),
            StructField("action", StringType()),
        ]
    )
    sink = PostgresSink(pg_dsn, table, ["event_id"], table, mode=mode)  # type: ignore[arg-type]
    sink.preflight(schema)
    install_audit(pg, table)
    return Job(tmp_path, table, pg_dsn, mode=mode, extra_args=("--api", api)), data


def verify(job: Job, data: Input, pg: psycopg.Connection[Any]) -> None:
    assert_exactly_once(pg, job.table, data.expected_ids)
    letters = pg.execute(
        "SELECT count(*) FROM exactlyonce_dead_letters WHERE query_name = %s", [job.table]
    ).fetchone()
    assert letters == (data.null_keys,), "each null-key record is dead-lettered exactly once"
    head = pg.execute(
        "SELECT epoch FROM exactlyonce_heads WHERE query_name = %s", [job.table]
    ).fetchone()
    assert head == (job.last_commit(),), "the sink head is Spark's last committed epoch"


MODES = ["insert", "append"]  # append: no unique index; exactly-once rests on head + catalog


# One job is killed at every named point in turn (one run per point, each resuming the
# previous one's checkpoint), then right after a Spark commit: every recovery path, with the
# suite's JVM starts kept in check.
NAMED_POINTS = [
    ("before_write", 2),
    ("mid_copy", 3),
    ("after_shard_commit", 4),
    ("after_head", 5),
]


@pytest.mark.parametrize("mode", MODES)
def test_kill_at_each_named_point_then_after_a_spark_commit(
    mode: str, tmp_path: Path, pg_dsn: str, pg: psycopg.Connection[Any], unique_name: str
) -> None:
    job, data = prepare(tmp_path, pg_dsn, pg, unique_name, files=9, mode=mode)
    job.kill_at_points(NAMED_POINTS)
    job.kill_after_commit(6)
    job.run_to_end()
    expected = [f"{point}@{epoch}" for point, epoch in NAMED_POINTS]
    assert job.kills == [*expected, "after Spark's commit of epoch 6"]
    verify(job, data, pg)


@pytest.mark.parametrize("mode", MODES)
def test_seeded_random_kills(
    mode: str, tmp_path: Path, pg_dsn: str, pg: psycopg.Connection[Any], unique_name: str
) -> None:
    seed = crash_seed()
    job, data = prepare(tmp_path, pg_dsn, pg, unique_name, files=22, seed=seed, mode=mode)
    job.kill_randomly(random.Random(seed), seed, runs=5, timeout=180)
    job.run_to_end()
    assert len(job.kills) == 5, f"kills: {job.kills} (seed {seed})"
    verify(job, data, pg)


# Spark's format API (format("exactlyonce"), insert mode only). No before_write in the driver
# here: the point fires in the task, before its first row; before_head is the driver's commit,
# before the head advances. One job is killed at every point in turn (one run per point, each
# resuming the previous one's checkpoint), to keep the suite's time in check.
FORMAT_POINTS = [
    ("before_write", 2),
    ("mid_copy", 3),
    ("after_shard_commit", 4),
    ("before_head", 5),
]


def test_format_api_kill_at_each_named_point(
    tmp_path: Path, pg_dsn: str, pg: psycopg.Connection[Any], unique_name: str
) -> None:
    job, data = prepare(tmp_path, pg_dsn, pg, unique_name, files=7, api="format")
    job.kill_at_points(FORMAT_POINTS)
    job.run_to_end()
    assert job.kills == [f"{point}@{epoch}" for point, epoch in FORMAT_POINTS]
    verify(job, data, pg)


def test_format_api_seeded_random_kills(
    tmp_path: Path, pg_dsn: str, pg: psycopg.Connection[Any], unique_name: str
) -> None:
    seed = crash_seed()
    job, data = prepare(tmp_path, pg_dsn, pg, unique_name, files=10, seed=seed, api="format")
    job.kill_randomly(random.Random(seed), seed, runs=3, timeout=180)
    job.run_to_end()
    assert len(job.kills) == 3, f"only {len(job.kills)} of 3 kills happened (seed {seed})"
    verify(job, data, pg)
