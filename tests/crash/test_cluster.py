"""Every sink on a standalone Spark cluster (master + 2 workers): F9, worker loss.

Proves the writes run in executor processes, not in the driver (PostgreSQL, by its audit
trigger's writer), and that SIGKILLing one worker (with its executor) while a task is inside
its write still ends exactly once, for every sink, and in Spark Real-time Mode.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg
import pytest

from exactlyonce.integration.lab.cluster import Cluster, ancestry, cmdline
from tests.crash import test_elasticsearch_crash as es_crash
from tests.crash import test_kafka_crash as kafka_crash
from tests.crash import test_redis_crash as redis_crash
from tests.crash.harness import Job, make_input
from tests.crash.test_postgres_crash import prepare, verify
from tests.support.realtime import (
    EventProducer,
    RealtimeJob,
    distinct_events,
    end_offsets,
    event_counts,
    frontiers,
    make_topic,
)
from tests.support.secrets_scan import assert_no_secrets

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


@pytest.fixture(scope="module")
def module_cluster(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """One cluster for this module's tests (per xdist worker): a JVM master and two worker
    starts saved per test."""
    c = Cluster(tmp_path_factory.mktemp("cluster"))
    c.start(workers=2)
    yield c
    c.stop()


def assert_cluster_logs_silent(cluster: Cluster, job: Job) -> None:
    """The cluster's logs (the master's, the workers', every executor's stdout and stderr)
    show no form of a password the job was given (the harness scans the job's own files)."""
    assert_no_secrets([cluster.workdir], job.secrets(), expect=["stderr", "worker*.log"])


@pytest.fixture
def cluster(module_cluster: Cluster) -> Cluster:
    """The module's cluster with both workers alive: the one an earlier test killed is
    started again (and registered) first."""
    for name in module_cluster.workers:
        if module_cluster.procs[name].poll() is not None:
            module_cluster.restart_worker(name)
    return module_cluster


def kill_paused_worker(cluster: Cluster, job: Job, point: str) -> str:
    """Wait until a task of ``job`` pauses at crash point ``point``, then SIGKILL the worker
    it runs under (with its executor); returns that worker's name."""
    job.wait_for_marker(point, timeout=240)
    paused_pid = int((job.crash_dir / f"crashed-{point}").read_text().split()[0])
    victim = cluster.worker_owning(paused_pid)
    assert victim is not None, f"the paused writer {paused_pid} is not under a worker"
    cluster.kill_worker(victim)
    return victim


def test_writes_run_on_executors_and_survive_a_worker_kill(
    cluster: Cluster, tmp_path: Path, pg_dsn: str, pg: psycopg.Connection[Any], unique_name: str
) -> None:
    job, data = prepare(tmp_path, pg_dsn, pg, unique_name, files=8)
    job.master = cluster.master_url
    job.start(crash_at="mid_copy@3")
    assert job.proc is not None
    watcher = ExecutorWatcher(job.proc.pid)
    watcher.start()
    victim = kill_paused_worker(cluster, job, "mid_copy")
    print(f"killed {victim} while its task was mid-COPY in epoch 3")
    job.finish(timeout=400)
    watcher.stopped.set()
    watcher.join()
    assert_cluster_logs_silent(cluster, job)

    verify(job, data, pg)
    writers = {
        int(str(app).rsplit(":", 1)[1])
        for (app,) in pg.execute(f'SELECT DISTINCT app FROM "{unique_name}_audit"').fetchall()
    }
    assert writers, "the audit saw no writer"
    assert writers <= watcher.executor_descendants, "a write ran outside the executors"
    assert not writers & watcher.driver_descendants, "a write ran in the driver"


# F9 for the other sinks: the crash point each job pauses at, inside a task's open write.
MID_WRITE = {"kafka": "mid_produce", "elasticsearch": "mid_bulk", "redis": "mid_write"}


@pytest.mark.parametrize("sink", sorted(MID_WRITE))
def test_every_sink_survives_a_worker_kill_mid_write(
    sink: str, cluster: Cluster, tmp_path: Path, unique_name: str, request: pytest.FixtureRequest
) -> None:
    """A task of epoch 2 pauses inside its write (rows sent, not committed); the worker
    running it is SIGKILLed with its executor; Spark runs the task again on the other
    worker; the sink's own audit (write counts) finds every record once."""
    job, verify_sink = _sink_job(sink, tmp_path, unique_name, request)
    job.master = cluster.master_url
    point = MID_WRITE[sink]
    job.start(crash_at=f"{point}@2")
    try:
        victim = kill_paused_worker(cluster, job, point)
        print(f"{sink}: killed {victim} while its task was at {point} in epoch 2")
        job.finish(timeout=400)
        assert 2 in job.spark_commits()
        assert_cluster_logs_silent(cluster, job)
        verify_sink()
    finally:
        job.stop_if_running()


def _sink_job(
    sink: str, tmp_path: Path, name: str, request: pytest.FixtureRequest
) -> tuple[Job, Callable[[], object]]:
    """The crash job of ``sink`` on 5 input files, and its audit."""
    if sink == "kafka":
        services = request.getfixturevalue("services")
        kafka_job, data, kafka_sink = kafka_crash.prepare(tmp_path, services, name, files=5)
        return kafka_job, lambda: kafka_crash.verify(kafka_job, data, kafka_sink)
    if sink == "elasticsearch":
        es = request.getfixturevalue("es")
        es_job, data = es_crash.prepare(tmp_path, es, name.replace("_", "-"), files=5)
        return es_job, lambda: es_crash.verify(es_job, data, es)
    sink_redis = request.getfixturevalue("sink_redis")
    data = make_input(tmp_path / "input", files=5, rows=120, seed=7)
    redis_job = redis_crash.RedisJob(tmp_path, name, sink_redis.url, write="hash")
    return redis_job, lambda: redis_crash.verify(redis_job, data, sink_redis, "hash")


def test_realtime_mode_survives_a_worker_kill_mid_epoch(
    cluster: Cluster,
    tmp_path: Path,
    pg_dsn: str,
    pg: psycopg.Connection[Any],
    bootstrap: str,
    unique_name: str,
) -> None:
    """Spark Real-time Mode on the cluster (PostgresSink.realtime(), the Arrow transport): a
    task of epoch 1 pauses just after a chunk and its frontier committed; the worker running
    it is SIGKILLed with its executor (and started again, so the epoch's two tasks fit). Spark
    runs the task again, or fails the query, which is then started again from its checkpoint;
    either way the retry reads the frontier and skips what the killed task committed. The
    audit reads the table with psycopg: every event once."""
    make_topic(bootstrap, unique_name)
    job = RealtimeJob(tmp_path, unique_name, pg_dsn, topic=unique_name, transport="arrow")
    job.master = cluster.master_url
    producer = EventProducer(bootstrap, unique_name, RTM_EVENTS, 100.0).start()
    restarts = 0
    try:
        job.start(crash_at="rtm_after_chunk@1")
        victim = kill_paused_worker(cluster, job, "rtm_after_chunk")
        print(f"killed {victim} while its Real-time Mode task was past a chunk of epoch 1")
        cluster.restart_worker(victim)
        producer.join()
        deadline = time.monotonic() + 300
        while distinct_events(pg, unique_name) < producer.events:
            assert time.monotonic() < deadline, f"not every event arrived:\n{job.log_tail()}"
            assert job.proc is not None
            if job.proc.poll() is not None:  # the query failed on the lost task: start again
                restarts += 1
                assert restarts <= 2, f"run {job.runs} failed again:\n{job.log_tail()}"
                print(f"run {job.runs} ended (exit {job.proc.returncode}); starting again")
                job.start()
            time.sleep(1.0)
        job.stop()
    finally:
        producer.done.set()
        job.stop_if_running()
    assert_cluster_logs_silent(cluster, job)
    counts = event_counts(pg, unique_name)
    assert set(counts) == producer.expected
    assert {e: n for e, n in counts.items() if n != 1} == {}, "events written twice"
    assert frontiers(pg, unique_name) == end_offsets(bootstrap, unique_name)


RTM_EVENTS = 3_000
