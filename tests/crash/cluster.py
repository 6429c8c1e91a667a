"""A local Spark standalone cluster: one master and N workers, each in its own session."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import pyspark

from tests.private_kafka import free_port


def spark_home() -> Path:
    return Path(pyspark.__file__).parent


@dataclass
class Cluster:
    """Free ports for the master and every web UI: two cluster tests may run at once."""

    workdir: Path
    port: int = field(default_factory=free_port)
    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    @property
    def master_url(self) -> str:
        return f"spark://127.0.0.1:{self.port}"

    def _spawn(self, name: str, *args: str) -> None:
        env = {
            **os.environ,
            "SPARK_HOME": str(spark_home()),
            "PYSPARK_PYTHON": sys.executable,
            "SPARK_LOCAL_IP": "127.0.0.1",
        }
        log = open(self.workdir / f"{name}.log", "wb")  # noqa: SIM115
        self.procs[name] = subprocess.Popen(
            [str(spark_home() / "bin" / "spark-class"), *args],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )

    def start(self, workers: int = 2) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        self._spawn(
            "master",
            "org.apache.spark.deploy.master.Master",
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--webui-port",
            str(free_port()),
        )
        for n in range(1, workers + 1):
            (self.workdir / f"worker{n}").mkdir(exist_ok=True)
            self._spawn(
                f"worker{n}",
                "org.apache.spark.deploy.worker.Worker",
                self.master_url,
                "--host",
                "127.0.0.1",
                "--cores",
                "1",
                "--memory",
                "1g",
                "--webui-port",
                str(free_port()),
                "--work-dir",
                str(self.workdir / f"worker{n}"),
            )
        deadline = time.monotonic() + 90
        while self.registered_workers() < workers:
            if time.monotonic() > deadline:
                raise AssertionError(f"workers did not register: {self.log('master')}")
            time.sleep(0.3)

    def registered_workers(self) -> int:
        return self.log("master").count("Registering worker")

    def log(self, name: str) -> str:
        return (self.workdir / f"{name}.log").read_text(errors="replace")

    def kill_worker(self, name: str) -> None:
        """SIGKILL a worker with its executor and Python workers (one process group)."""
        os.killpg(self.procs[name].pid, signal.SIGKILL)
        self.procs[name].wait(timeout=30)

    def worker_owning(self, pid: int) -> str | None:
        chain = ancestry(pid)
        for name, proc in self.procs.items():
            if name.startswith("worker") and proc.pid in chain:
                return name
        return None

    def stop(self) -> None:
        for proc in self.procs.values():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)


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
