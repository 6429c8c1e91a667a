"""The PostgreSQL sink on a standalone Spark cluster (master + 2 workers).

Proves the writes run in executor processes, not in the driver, and that SIGKILLing one
worker (with its executor) in the middle of a batch still ends exactly once.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import psycopg
import pytest

from tests.crash.cluster import Cluster, ancestry, cmdline
from tests.crash.test_postgres_crash import prepare, verify

pytestmark = [pytest.mark.crash, pytest.mark.cluster, pytest.mark.integration]


class ExecutorWatcher(threading.Thread):
    """Samples which live processes descend from an executor JVM, and from the driver."""

    def __init__(self, driver_pid: int) -> None:
        super().__init__(daemon=True)
        self.driver_pid = driver_pid
        self.executor_descendants: set[int] = set()
        self.driver_descendants: set[int] = set()
        self.stopped = threading.Event()

    def run(self) -> None:
        while not self.stopped.is_set():
            for entry in Path("/proc").iterdir():
                if not entry.name.isdigit():
                    continue
                chain = ancestry(int(entry.name))
                if self.driver_pid in chain:
                    self.driver_descendants.add(int(entry.name))
                elif any("CoarseGrainedExecutorBackend" in cmdline(p) for p in chain[1:]):
                    self.executor_descendants.add(int(entry.name))
            time.sleep(0.2)


@pytest.fixture
def cluster(tmp_path: Path) -> Any:
    c = Cluster(tmp_path / "cluster")
    c.start(workers=2)
    yield c
    c.stop()


def test_writes_run_on_executors_and_survive_a_worker_kill(
    cluster: Cluster, tmp_path: Path, pg_dsn: str, pg: psycopg.Connection[Any], unique_name: str
) -> None:
    job, data = prepare(tmp_path, pg_dsn, pg, unique_name, files=8)
    job.master = cluster.master_url
    job.start(crash_at="mid_copy@3")
    assert job.proc is not None
    watcher = ExecutorWatcher(job.proc.pid)
    watcher.start()
    job.wait_for_marker("mid_copy", timeout=240)
    paused_pid = int((job.crash_dir / "crashed-mid_copy").read_text().split()[0])
    victim = cluster.worker_owning(paused_pid)
    assert victim is not None, f"the paused writer {paused_pid} is not under a worker"
    cluster.kill_worker(victim)
    print(f"killed {victim} while its task was mid-COPY in epoch 3")
    job.finish(timeout=400)
    watcher.stopped.set()
    watcher.join()

    verify(job, data, pg)
    writers = {
        int(str(app).rsplit(":", 1)[1])
        for (app,) in pg.execute(f'SELECT DISTINCT app FROM "{unique_name}_audit"').fetchall()
    }
    assert writers, "the audit saw no writer"
    assert writers <= watcher.executor_descendants, "a write ran outside the executors"
    assert not writers & watcher.driver_descendants, "a write ran in the driver"
