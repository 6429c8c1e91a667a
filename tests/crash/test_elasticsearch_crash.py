"""kill -9 the real PySpark job writing to Elasticsearch at every named point; restart; audit.

The job (tests/crash/es_job.py) runs in its own session and is SIGKILLed whole (driver, JVM,
Python workers); Elasticsearch (or the test server, in this pytest process) is not. The audit
counts successful writes per ``_id`` (the test server's write counters, or ``_version`` on a
real cluster), so a second write of a record is caught even though ``_id`` is unique.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import pytest

from tests.crash.harness import Input, Job, crash_seed, make_input
from tests.support.es_fixtures import EsHandle

pytestmark = [pytest.mark.crash, pytest.mark.integration]

CONTROL = "exactlyonce-control"


@dataclass
class EsJob(Job):
    """tests/crash/harness.py's Job, running es_job.py against ``dsn`` (the cluster's URL)."""

    script: ClassVar[Path] = Path(__file__).with_name("es_job.py")

    def sink_env(self) -> dict[str, str]:
        return {}

    def sink_args(self) -> list[str]:
        return ["--table", self.table, "--es-url", self.dsn, "--mode", self.mode]


def prepare(
    tmp_path: Path, es: EsHandle, index: str, files: int = 8, seed: int = 7
) -> tuple[EsJob, Input]:
    data = make_input(tmp_path / "input", files=files, rows=150, seed=seed)
    return EsJob(tmp_path, index, es.url, mode="create"), data


def verify(job: EsJob, data: Input, es: EsHandle) -> None:
    writes = es.writes(job.table)
    doubled = {i: n for i, n in writes.items() if n > 1}
    assert not doubled, f"{len(doubled)} _ids written more than once: {list(doubled.items())[:5]}"
    missing = data.expected_ids - set(writes)
    assert not missing, f"{len(missing)} expected _ids missing"
    assert set(writes) == data.expected_ids, "unexpected _ids in the index"
    letters = es.writes(f"{job.table}-dead-letters")
    assert len(letters) == data.null_keys, "each null-key record is dead-lettered exactly once"
    assert set(letters.values()) <= {1}
    last_commit = job.last_commit()
    with es.client() as client:
        head = client.get(index=CONTROL, id=f"{job.table}|elasticsearch:{job.table}")
    assert head["_source"]["epoch"] == last_commit, "the head is Spark's last committed epoch"
    print(f"verified: {len(writes)} _ids written once each, {len(letters)} dead letters")


@pytest.fixture
def index(unique_name: str) -> str:
    return unique_name.replace("_", "-")


def test_kill_at_every_named_point(
    tmp_path: Path, services: dict[str, str], es: EsHandle, index: str
) -> None:
    """One job, killed in turn at each point of the write path (one epoch each). Not here,
    each one more JVM start: before_write (the driver's shared protocol before any write,
    the same for every sink) and a kill after Spark's commit (a plain restart at the head);
    PostgreSQL's named-point test has both, and make soak kills every sink at every point."""
    job, data = prepare(tmp_path, es, index, files=6)
    schedule = [("mid_bulk", 1), ("after_shard_commit", 2), ("after_head", 3)]
    job.kill_at_points(schedule, timeout=240)
    job.run_to_end(timeout=300)
    assert job.kills == [f"{point}@{epoch}" for point, epoch in schedule]
    verify(job, data, es)


def test_seeded_random_kills_with_429s_and_a_lost_bulk_reply(
    tmp_path: Path, services: dict[str, str], es: EsHandle, index: str
) -> None:
    seed = crash_seed()
    rng = random.Random(seed)
    job, data = prepare(tmp_path, es, index, files=16, seed=seed)
    server = es.server
    job.start()
    job._wait(lambda: len(job.spark_commits()) >= 1, 240, "first commit")
    if server is not None:
        # Elasticsearch answers 429 to every bulk item for 10 s; the job must ride it out.
        rejected, dropped = server.rejected_items, server.dropped_replies
        server.reject_for(10)
        window_end = time.monotonic() + 10
        before = job.spark_commits()
        job._wait(
            lambda: time.monotonic() > window_end and len(job.spark_commits() - before) >= 1,
            240,
            "a commit after the 429 window",
        )
        assert server.rejected_items > rejected, "the 429 window rejected bulk items"
        server.drop_after_apply(1)  # the next bulk is applied, its reply lost
        job._wait(lambda: server.dropped_replies > dropped, 120, "a dropped bulk reply")
    else:
        print("real Elasticsearch: no 429 window and no dropped reply (no fault injection)")
    assert job.kill_at_random_moment(rng, f"random kill 1 (seed {seed})", max_delay=1.5), (
        f"the run finished before random kill 1 (seed {seed})"
    )
    job.kill_randomly(rng, seed, runs=2, first=2)
    job.run_to_end(timeout=300)
    assert len(job.kills) == 3, f"kills: {job.kills} (seed {seed})"
    verify(job, data, es)


# Spark's format API (format("exactlyonce")): no shard markers on this path, so a task killed
# after its last bulk, before its IDs reached the catalog, is re-run whole: every re-sent
# `create` must be a 409, never a second write; mid_bulk leaves a task half-written. One job,
# killed at each point in turn: two JVM restarts, for the suite's time.
FORMAT_POINTS = [("mid_bulk", 1), ("after_shard_commit", 2)]


def test_format_api_kill_at_each_named_point(
    tmp_path: Path, services: dict[str, str], es: EsHandle, index: str
) -> None:
    job, data = prepare(tmp_path, es, index, files=6, seed=31)
    assert data.null_keys == 1, "the last file holds a null key: a dead letter"
    job.extra_args = ("--api", "format")
    job.kill_at_points(FORMAT_POINTS, timeout=240)
    job.run_to_end(timeout=300)
    assert job.kills == [f"{point}@{epoch}" for point, epoch in FORMAT_POINTS]
    verify(job, data, es)
