"""Kill and restart the catalog's Redis (it restarts EMPTY) while a real Spark job runs.

The catalog's Redis here is a private redis-server without persistence (not the services'
one, which other tests share, also under pytest-xdist), so a restart is a total catalog loss.
The job must end exactly-once: an append-only table rebuilds the catalog from its own rows; a
table with a unique key starts an empty catalog; with on_catalog_loss="fail" the job refuses
clearly and what it committed before is still exactly-once. Committed insert attempts are
counted (tests/support/audit.py), so with the unique key the test sees, and checks exactly,
the records the empty catalog lets through again for the index to absorb.
"""

from __future__ import annotations

import shutil
import tempfile
from collections import Counter, defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from tests.crash.harness import Job, epoch_of_each_file, input_ids
from tests.crash.test_postgres_crash import prepare, verify
from tests.support.audit import attempt_epochs, sink_ids, write_counts
from tests.support.redis_fixtures import SinkRedis, free_port

pytestmark = [pytest.mark.crash, pytest.mark.integration]


@pytest.fixture
def catalog_redis(services: dict[str, str]) -> Iterator[SinkRedis]:
    """A private catalog Redis that restarts EMPTY (``appendonly no``, no snapshots)."""
    directory = Path(tempfile.mkdtemp(prefix="eo-catalog-redis-"))
    server = SinkRedis(directory, free_port(), persistent=False)
    server.start()
    yield server
    server.kill()
    shutil.rmtree(directory, ignore_errors=True)


LOST_AFTER = 3  # the catalog's Redis restarts empty once this epoch's head advanced


def attempts_after_catalog_loss(job: Job, lost_after: int) -> dict[str, Counter[int]]:
    """Per record ID, the committed insert attempts per epoch that insert mode makes when
    the catalog restarts empty after epoch ``lost_after``: once in the first epoch holding
    the ID, and once more in the first later epoch holding it again, if the ID was written
    at or before the loss (the empty catalog does not know it; once written again, it does)."""
    epoch_of = epoch_of_each_file(job.checkpoint)
    holding: dict[str, set[int]] = defaultdict(set)
    for n, ids in input_ids(job.workdir / "input").items():
        for i in ids:
            holding[i].add(epoch_of[n])
    out = {}
    for i, epochs in holding.items():
        first, later = min(epochs), [e for e in epochs if e > lost_after]
        out[i] = Counter({first: 1})
        if first <= lost_after and later:
            out[i][min(later)] += 1
    return out


def start_and_restart_redis_after(job: Job, catalog: SinkRedis, epoch: int) -> None:
    """Start the job; restart the catalog's Redis while the job is held after ``epoch``'s
    head advanced (so a restart at a free-running moment cannot land after the job's last
    epoch)."""
    job.env["EXACTLYONCE_REDIS_URL"] = catalog.url
    job.start(hold_at=f"after_head@{epoch}")
    job.wait_until_held("after_head")
    with catalog.client() as r:
        assert r.dbsize() > 0, "the job kept no catalog in the private Redis"
    catalog.restart(down_seconds=2.0)
    with catalog.client() as r:
        assert r.dbsize() == 0, "the catalog's Redis did not restart empty"
    job.release("after_head")
    print(f"catalog redis restarted empty after epoch {epoch} committed")


@pytest.mark.parametrize("mode", ["append", "insert"])
def test_redis_restart_mid_run_recovers(
    mode: str,
    tmp_path: Path,
    pg_dsn: str,
    pg: psycopg.Connection[Any],
    unique_name: str,
    catalog_redis: SinkRedis,
) -> None:
    job, data = prepare(tmp_path, pg_dsn, pg, unique_name, files=14, mode=mode)
    start_and_restart_redis_after(job, catalog_redis, LOST_AFTER)
    job.finish()
    if mode == "append":  # rebuilt from the table: nothing is sent twice
        verify(job, data, pg)
    else:  # an empty catalog: the unique index absorbs what it forgot, exactly that
        attempts = attempt_epochs(pg, unique_name)
        expected = attempts_after_catalog_loss(job, LOST_AFTER)
        assert attempts == expected, (
            f"{sum(a != expected.get(i) for i, a in attempts.items())} IDs attempted otherwise "
            "than once, plus once in the first epoch after the loss that holds them again"
        )
        again = {i: 2 for i, c in expected.items() if sum(c.values()) == 2}
        print(f"{len(again)} records sent again after the catalog loss, each absorbed")
        verify(job, data, pg, again)
    log = (job.workdir / f"run-{job.runs}.log").read_text()
    done = [line for line in log.splitlines() if line.startswith("JOB DONE")]
    assert done and "catalog rebuilds 0" not in done[0], f"no catalog recovery seen: {done}"
    if mode == "append":
        assert "catalog rebuilt from the sink" in log


def test_redis_restart_with_fail_policy_refuses_and_loses_nothing(
    tmp_path: Path,
    pg_dsn: str,
    pg: psycopg.Connection[Any],
    unique_name: str,
    catalog_redis: SinkRedis,
) -> None:
    job, data = prepare(tmp_path, pg_dsn, pg, unique_name, files=14, mode="append")
    job.extra_args = ("--on-catalog-loss", "fail")
    start_and_restart_redis_after(job, catalog_redis, 3)
    assert job.proc is not None
    code = job.proc.wait(timeout=300)
    log = (job.workdir / f"run-{job.runs}.log").read_text()
    assert code != 0, "the job must refuse to go on without its catalog"
    assert "on_catalog_loss='fail' refuses to guess" in log
    ids = sink_ids(pg, unique_name)
    assert len(ids) == len(set(ids)), "no duplicate row"
    assert all(n == 1 for n in write_counts(pg, unique_name).values()), "no double write"
    assert set(ids) <= data.expected_ids
