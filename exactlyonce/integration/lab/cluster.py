"""A local Spark standalone cluster: one master and N workers, each in a session of its own,
on free ports (two clusters may run at once). ``exactlyonce chaos --cluster`` runs a pipeline
on one and SIGKILLs its workers; the cluster crash tests use it too.

A worker's session holds the worker JVM, the executor JVM it launched for an application and
that executor's Python workers: :meth:`Cluster.kill_worker` SIGKILLs all of them, as a lost
machine would, and :meth:`Cluster.restart_worker` starts the worker again, which registers
with the master and gets a new executor.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

REGISTER_TIMEOUT_S = 90.0
EXECUTOR_CLASS = "CoarseGrainedExecutorBackend"


def free_port() -> int:
    """A TCP port nobody listens on now (the OS's pick)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def spark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).parent


@dataclass
class Cluster:
    """A master on ``port`` and its workers ``worker1``..``workerN`` (1 core, 1 GiB each),
    their logs in ``workdir``."""

    workdir: Path
    port: int = field(default_factory=free_port)
    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    @property
    def master_url(self) -> str:
        return f"spark://127.0.0.1:{self.port}"

    @property
    def workers(self) -> list[str]:
        return sorted(name for name in self.procs if name.startswith("worker"))

    def start(self, workers: int = 2) -> None:
        """Start the master and ``workers`` workers; return once all registered."""
        self.workdir.mkdir(parents=True, exist_ok=True)
        master = ["org.apache.spark.deploy.master.Master", "--host", "127.0.0.1"]
        self._spawn("master", *master, "--port", str(self.port), "--webui-port", str(free_port()))
        for n in range(1, workers + 1):
            self._spawn_worker(f"worker{n}")
        self._wait_registered(workers)

    def _spawn_worker(self, name: str) -> None:
        work = self.workdir / name
        work.mkdir(exist_ok=True)
        self._spawn(
            name,
            "org.apache.spark.deploy.worker.Worker",
            self.master_url,
            *("--host", "127.0.0.1", "--cores", "1", "--memory", "1g"),
            *("--webui-port", str(free_port()), "--work-dir", str(work)),
        )

    def _spawn(self, name: str, *args: str) -> None:
        env = {
            **os.environ,
            "SPARK_HOME": str(spark_home()),
            "PYSPARK_PYTHON": sys.executable,
            "SPARK_LOCAL_IP": "127.0.0.1",
        }
        with open(self.workdir / f"{name}.log", "ab") as log:
            self.procs[name] = subprocess.Popen(
                [str(spark_home() / "bin" / "spark-class"), *args],
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,
            )

    def _wait_registered(self, count: int) -> None:
        deadline = time.monotonic() + REGISTER_TIMEOUT_S
        while self.registered_workers() < count:
            if time.monotonic() > deadline:
                raise RuntimeError(f"Spark workers did not register:\n{self.log('master')}")
            time.sleep(0.3)

    def registered_workers(self) -> int:
        """Worker registrations the master logged (a restarted worker registers again)."""
        return self.log("master").count("Registering worker")

    def log(self, name: str) -> str:
        return (self.workdir / f"{name}.log").read_text(errors="replace")

    def kill_worker(self, name: str) -> None:
        """SIGKILL a worker with its executor and Python workers (one process group)."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.procs[name].pid, signal.SIGKILL)
        self.procs[name].wait(timeout=30)

    def restart_worker(self, name: str) -> None:
        """Start the killed worker ``name`` again; return once it registered."""
        before = self.registered_workers()
        self._spawn_worker(name)
        self._wait_registered(before + 1)

    def executors_of(self, name: str) -> list[int]:
        """The pids of the executor JVMs running under worker ``name`` now."""
        worker = self.procs[name].pid
        return [
            pid for pid in _pids() if EXECUTOR_CLASS in cmdline(pid) and worker in ancestry(pid)[1:]
        ]

    def worker_owning(self, pid: int) -> str | None:
        """The worker ``pid`` runs under (an executor's Python worker, say), if any."""
        chain = ancestry(pid)
        for name in self.workers:
            if self.procs[name].pid in chain:
                return name
        return None

    def stop(self) -> None:
        for proc in self.procs.values():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)


def _pids() -> list[int]:
    return [int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit()]


def ancestry(pid: int) -> list[int]:
    """pid, its parent, its grandparent ... up to init (empty when pid is gone)."""
    chain = []
    while pid > 1:
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            break
        chain.append(pid)
        pid = int(stat.rsplit(")", 1)[1].split()[1])
    return chain


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""
