"""kill -9 the real PySpark job at every named point of the write path; restart; audit.

The audit (tests/support/audit.py) counts committed insert ATTEMPTS per record ID (a BEFORE
INSERT trigger, which also fires for a row ``ON CONFLICT DO NOTHING`` skips) and rows inserted
(AFTER INSERT), so a second write is caught even though insert mode's unique key would make it
a no-op. The format API's insert mode keeps no shard marker: an epoch whose task committed
and whose head did not advance is written again whole, and the unique index absorbs it; those
tests say exactly which epochs are attempted twice (:func:`verify_format`).
"""

from __future__ import annotations

import random
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import psycopg
import pytest

from exactlyonce.connectors import PostgresSink
from exactlyonce.integration.lab.fault_proxy import FaultProxy
from tests.crash.harness import (
    Input,
    Job,
    crash_seed,
    files_holding,
    input_ids,
    make_input,
    one_file_epochs,
    wait_until,
)
from tests.support.audit import assert_exactly_once, assert_rewrites, install_audit
from tests.support.private_postgres import PrivatePostgres

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


def verify(
    job: Job,
    data: Input,
    pg: psycopg.Connection[Any],
    reattempted: Mapping[str, int] | None = None,
) -> None:
    assert_exactly_once(pg, job.table, data.expected_ids, reattempted)
    letters = pg.execute(
        "SELECT count(*) FROM exactlyonce_dead_letters WHERE query_name = %s", [job.table]
    ).fetchone()
    assert letters == (data.null_keys,), "each null-key record is dead-lettered exactly once"
    head = pg.execute(
        "SELECT epoch FROM exactlyonce_heads WHERE query_name = %s", [job.table]
    ).fetchone()
    assert head == (job.last_commit(),), "the sink head is Spark's last committed epoch"


def verify_format(
    job: Job, data: Input, pg: psycopg.Connection[Any], named: set[int], random_kills: int
) -> None:
    """:func:`verify` for the format API's insert mode, which keeps no shard marker: the
    attempts the unique index absorbs are exactly those the design makes
    (tests/support/audit.py :func:`assert_rewrites`): the epochs in ``named`` were killed
    after their tasks committed, before the head; random kills may add one epoch each."""
    holders = files_holding(job.checkpoint, input_ids(job.workdir / "input"))
    single = one_file_epochs(job.checkpoint)
    verify(job, data, pg, assert_rewrites(pg, job.table, holders, named, random_kills, single))


# One job is killed at every named point in turn (one run per point, each resuming the
# previous one's checkpoint), then right after a Spark commit: every recovery path of the
# foreachBatch writer. In mode="append" (no unique index), where a second write of a record
# would be a second row (in mode="insert" the index makes it a no-op; the attempt log still
# counts it). Insert mode is SIGKILLed at these points through the format API (the same
# PostgreSQL task writer, without shard markers: test_format_api_kill_at_each_named_point)
# and, through foreachBatch, by exactlyonce chaos (test_chaos_command.py: mid_copy and random
# kills), the cluster's mid-COPY worker kill and the server restarts below.
NAMED_POINTS = [
    ("before_write", 2),
    ("mid_copy", 3),
    ("after_shard_commit", 4),
    ("after_head", 5),
]


def test_kill_at_each_named_point_then_after_a_spark_commit(
    tmp_path: Path, pg_dsn: str, pg: psycopg.Connection[Any], unique_name: str
) -> None:
    job, data = prepare(tmp_path, pg_dsn, pg, unique_name, files=9, mode="append")
    job.kill_at_points(NAMED_POINTS)
    job.kill_after_commit(6)
    job.run_to_end()
    expected = [f"{point}@{epoch}" for point, epoch in NAMED_POINTS]
    assert job.kills == [*expected, "after Spark's commit of epoch 6"]
    verify(job, data, pg)


# Random kills in append mode (no unique index: the head and the catalog alone keep it exactly
# once). Insert mode's random kills are test_format_api_seeded_random_kills': the same task
# writer in insert mode, one JVM start per kill saved in the suite.
def test_seeded_random_kills(
    tmp_path: Path, pg_dsn: str, pg: psycopg.Connection[Any], unique_name: str
) -> None:
    seed = crash_seed()
    job, data = prepare(tmp_path, pg_dsn, pg, unique_name, files=14, seed=seed, mode="append")
    job.kill_randomly(random.Random(seed), seed, runs=3, timeout=180)
    job.run_to_end()
    assert len(job.kills) == 3, f"kills: {job.kills} (seed {seed})"
    verify(job, data, pg)


# Spark's format API (format("exactlyonce"), insert mode only): mid_copy and
# after_shard_commit in the task, before_head in the driver's commit, before the head advances.
# (before_write fires in the task before its first row, nothing written: a re-run of the whole
# epoch, like a task Spark retries; not worth a JVM start here, make soak kills there.) One job
# is killed at every point in turn (one run per point, each resuming the previous one's
# checkpoint), to keep the suite's time in check.
FORMAT_POINTS = [
    ("mid_copy", 2),
    ("after_shard_commit", 3),
    ("before_head", 4),
]
# Killed after the epoch's task committed, before the head: its re-run attempts it again.
AFTER_A_TASK_COMMIT = {"after_shard_commit", "before_head"}


def test_format_api_kill_at_each_named_point(
    tmp_path: Path, pg_dsn: str, pg: psycopg.Connection[Any], unique_name: str
) -> None:
    job, data = prepare(tmp_path, pg_dsn, pg, unique_name, files=6, api="format")
    job.kill_at_points(FORMAT_POINTS)
    job.run_to_end()
    assert job.kills == [f"{point}@{epoch}" for point, epoch in FORMAT_POINTS]
    rewritten = {e for p, e in FORMAT_POINTS if p in AFTER_A_TASK_COMMIT}
    verify_format(job, data, pg, rewritten, random_kills=0)


def test_format_api_seeded_random_kills(
    tmp_path: Path, pg_dsn: str, pg: psycopg.Connection[Any], unique_name: str
) -> None:
    seed = crash_seed()
    job, data = prepare(tmp_path, pg_dsn, pg, unique_name, files=10, seed=seed, api="format")
    job.kill_randomly(random.Random(seed), seed, runs=3, timeout=180)
    job.run_to_end()
    assert len(job.kills) == 3, f"only {len(job.kills)} of 3 kills happened (seed {seed})"
    verify_format(job, data, pg, set(), random_kills=len(job.kills))


def test_the_sink_server_restarted_hard_and_clean_under_a_running_job(
    tmp_path: Path,
    tmp_path_factory: pytest.TempPathFactory,
    services: dict[str, str],
    unique_name: str,
) -> None:
    """F3: the sink's own PostgreSQL (a private one) is crashed (SIGKILL of every server
    process) while a task is inside its COPY (held at mid_copy, rows sent before and after
    in one transaction), then stopped cleanly at a seeded moment while the job runs freely.
    A run may ride a restart out or die; a dead run is started again. Then the audit."""
    seed = crash_seed("server restart schedule")
    rng = random.Random(seed)
    # The server's home lies outside the job's directory: its services.env holds the URL with
    # the password on purpose, and the job's directory is scanned for credentials.
    server = PrivatePostgres(tmp_path_factory.mktemp("pg-home"))
    server.start()
    job: Job | None = None
    try:
        with psycopg.connect(server.dsn, autocommit=True) as pg:
            job, data = prepare(tmp_path, server.dsn, pg, unique_name, files=14, seed=seed)
        job.start(hold_at="mid_copy@2")
        job.wait_until_held("mid_copy")
        server.restart("hard", where="a task held inside its COPY of epoch 2")
        job.release("mid_copy")
        print(f"hard restart: run {job.runs} {job.progress_or_exit()}", flush=True)
        if job.proc is None or job.proc.poll() is not None:
            job.start()
        job.wait_for_progress()
        time.sleep(rng.uniform(0.0, 1.5))
        assert job.proc is not None and job.proc.poll() is None, "the input ran out"
        server.restart("clean", where=f"run {job.runs} after epoch {max(job.spark_commits())}")
        print(f"clean restart: run {job.runs} {job.progress_or_exit()}", flush=True)
        job.end()
        assert [r.kind for r in server.restarts] == ["hard", "clean"]
        with psycopg.connect(server.dsn, autocommit=True) as pg:
            verify(job, data, pg)
    finally:
        if job is not None:
            job.stop_if_running()
        server.remove()


def test_lost_commit_replies_are_verified_not_assumed(
    tmp_path: Path, pg_dsn: str, pg: psycopg.Connection[Any], unique_name: str
) -> None:
    """F6: the job reaches PostgreSQL through a proxy that, twice at a seeded moment while
    the job runs, lets the next ``COMMIT`` (a task's shard transaction or the driver's head)
    reach the server and be applied, then throws its reply away and cuts the connection.
    The writer must find out what happened from the sink (its markers), never guess."""
    seed = crash_seed("lost reply schedule")
    rng = random.Random(seed)
    server = urlsplit(pg_dsn)
    assert server.hostname is not None and server.port is not None
    proxy = FaultProxy(server.hostname, server.port)
    dsn = pg_dsn.replace(f":{server.port}/", f":{proxy.port}/")
    job: Job | None = None
    try:
        job, data = prepare(tmp_path, dsn, pg, unique_name, files=10, seed=seed)
        outcomes = []
        for n in range(2):
            if job.proc is None or job.proc.poll() is not None:
                job.start()
            job.wait_for_progress()
            time.sleep(rng.uniform(0.0, 1.0))
            proxy.drop_reply_to(b"COMMIT")
            wait_until(lambda: not proxy.armed(), f"lost reply {n + 1}")
            outcomes.append(job.progress_or_exit())
            print(f"lost reply {n + 1}: {proxy.dropped[-1]}; run {job.runs} {outcomes[-1]}")
        assert len(proxy.dropped) == 2
        job.end()
        # A task whose COMMIT reply was lost reads its own shard markers and goes on; a
        # driver's (the head) fails the run, whose re-run finds the head. Either way, told.
        logs = "".join(p.read_text(errors="replace") for p in tmp_path.glob("run-*.log"))
        verified = logs.count("the reply to COMMIT was lost")
        assert verified >= outcomes.count("rode it out"), (outcomes, verified)
        verify(job, data, pg)
    finally:
        if job is not None:
            job.stop_if_running()
        proxy.stop()
