"""A private 3-master Redis Cluster for the catalog's cluster tests (no replicas).

Three ``redis-server --cluster-enabled yes`` processes on free ports (each with its cluster
bus port, ``port + 10000``, free too), in a temp dir, joined by ``redis-cli --cluster
create``. Each master keeps an AOF with ``appendfsync always``, so a SIGKILL and restart
(:meth:`RedisClusterNodes.restart`) keeps every acknowledged write, and the node rejoins with
its ``nodes.conf``; ``restart(..., empty=True)`` deletes its AOF first: the master comes back
owning its slots with no data (a total loss of that master's shards).

Use the session fixture ``redis_cluster`` (no import: ``tests/conftest.py`` loads this module
with ``pytest_plugins``): one cluster per session (per pytest-xdist worker), SIGKILLed at
exit.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import random
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from redis.cluster import RedisCluster

HOST = "127.0.0.1"


def _free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind((HOST, port))
        except OSError:
            return False
    return True


def free_cluster_ports(n: int) -> list[int]:
    """``n`` ports whose cluster bus ports (+10000) are free as well."""
    ports: list[int] = []
    while len(ports) < n:
        port = random.randint(20_000, 45_000)
        if port not in ports and _free(port) and _free(port + 10_000):
            ports.append(port)
    return ports


class RedisClusterNodes:
    """Three masters: start, join, SIGKILL and restart one, stop all."""

    def __init__(self, directory: Path, ports: list[int], *, persistent: bool = True) -> None:
        self.dir = directory
        self.ports = ports
        self.persistent = persistent
        self.procs: dict[int, subprocess.Popen[bytes]] = {}
        for port in ports:
            self._node_dir(port).mkdir(parents=True, exist_ok=True)

    @property
    def url(self) -> str:
        return f"redis://{HOST}:{self.ports[0]}/0"

    def _node_dir(self, port: int) -> Path:
        return self.dir / str(port)

    def start_node(self, port: int, timeout: float = 30.0) -> None:
        node = self._node_dir(port)
        argv = ["redis-server", "--port", str(port), "--bind", HOST, "--dir", str(node)]
        argv += ["--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf"]
        argv += ["--cluster-node-timeout", "2000", "--save", ""]
        if self.persistent:
            argv += ["--appendonly", "yes", "--appendfsync", "always"]
        argv += ["--logfile", str(node / "redis.log")]
        self.procs[port] = subprocess.Popen(
            argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
        )
        deadline = time.monotonic() + timeout
        while True:
            with contextlib.suppress(redis.ConnectionError, redis.TimeoutError):
                with redis.Redis(host=HOST, port=port, socket_timeout=5) as r:
                    r.ping()
                return
            if self.procs[port].poll() is not None or time.monotonic() > deadline:
                log = (node / "redis.log").read_text(errors="replace")[-2000:]
                raise RuntimeError(f"cluster node {port} did not start:\n{log}")
            time.sleep(0.05)

    def start(self) -> None:
        for port in self.ports:
            self.start_node(port)
        subprocess.run(
            ["redis-cli", "--cluster", "create", *[f"{HOST}:{p}" for p in self.ports]]
            + ["--cluster-replicas", "0", "--cluster-yes"],
            check=True,
            capture_output=True,
            timeout=120,
        )
        self.wait_ok()

    def wait_ok(self, timeout: float = 60.0) -> None:
        """Until every node says ``cluster_state:ok`` (all slots served)."""
        deadline = time.monotonic() + timeout
        while True:
            states = []
            for port in self.ports:
                with (
                    contextlib.suppress(redis.RedisError),
                    redis.Redis(host=HOST, port=port, socket_timeout=5) as r,
                ):
                    states.append(r.cluster("info").get("cluster_state"))
            if states == ["ok"] * len(self.ports):
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"the Redis Cluster is not ok: {states}")
            time.sleep(0.1)

    def kill_node(self, port: int) -> None:
        proc = self.procs.pop(port, None)
        if proc is not None and proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)

    def restart(self, port: int, down_seconds: float = 1.0, empty: bool = False) -> None:
        """SIGKILL one master and start it again on its data (or, ``empty``, without)."""
        self.kill_node(port)
        if empty:
            shutil.rmtree(self._node_dir(port) / "appendonlydir", ignore_errors=True)
        time.sleep(down_seconds)
        self.start_node(port)
        self.wait_ok()

    def stop(self) -> None:
        for port in list(self.procs):
            self.kill_node(port)

    def client(self) -> Any:
        return RedisCluster(host=HOST, port=self.ports[0], socket_timeout=30)

    def port_of(self, key: str) -> int:
        """The port of the master that serves ``key``'s slot."""
        with self.client() as c:
            node = c.get_node_from_key(key)
            return int(node.port)


_CLUSTER: RedisClusterNodes | None = None


def _stop_cluster() -> None:
    if _CLUSTER is not None:
        _CLUSTER.stop()
        shutil.rmtree(_CLUSTER.dir, ignore_errors=True)


def session_cluster() -> RedisClusterNodes:
    """The session's cluster, started on first use."""
    global _CLUSTER
    if _CLUSTER is None:
        directory = Path(tempfile.mkdtemp(prefix="eo-redis-cluster-"))
        cluster = RedisClusterNodes(directory, free_cluster_ports(3))
        atexit.register(_stop_cluster)
        _CLUSTER = cluster
        cluster.start()
    return _CLUSTER


@pytest.fixture(scope="session")
def redis_cluster() -> Iterator[RedisClusterNodes]:
    yield session_cluster()
