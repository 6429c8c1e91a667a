"""The soak's own servers, apart from the local services (``exactlyonce services``) that
chaos restarts:

- the Elasticsearch stand-in (``python -m tests.support.es_server``): there is no Elasticsearch
  server here; chaos does not restart it (not a local service), so its faults are skipped;
- a genuine OpenSearch node for the OpenSearch cell: the home's ``opensearch`` service (its
  jars from Maven Central, data on disk), started here if it is not up and left running, so
  chaos restarts it (the sink's own server first: a hard and a clean restart per cell) beside
  the catalog's Redis;
- the 3-node Kafka cluster of the ``kafka3`` cell, a local service of the home
  (``services up --only kafka3``; started here if it is not up, and left running like the
  other local services): chaos fails its brokers over (``chaos/brokers.py``);
- the Redis SINK's redis-server, with AOF (``appendfsync always``) as a sink's Redis must
  have: the local Redis service has no persistence, so a hard restart of a Redis holding the
  sink's data would lose it (not a sink bug). It is the home's ``redis-aof`` service, so
  chaos restarts it (the sink's own server first: a hard and a clean restart per cell) beside
  the catalog's Redis.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

HOST = "127.0.0.1"
START_TIMEOUT_S = 30.0
OPENSEARCH_TIMEOUT_S = 900.0  # the first start resolves its jars with Maven


def free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return int(s.getsockname()[1])


def _wait_open(port: int, proc: subprocess.Popen[bytes], what: str, log: Path) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while True:
        with contextlib.suppress(OSError), socket.create_connection((HOST, port), timeout=1):
            return
        if proc.poll() is not None or time.monotonic() > deadline:
            tail = log.read_text(errors="replace")[-2000:] if log.exists() else ""
            raise SystemExit(f"soak: {what} did not start on port {port}:\n{tail}")
        time.sleep(0.1)


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=20)


@contextlib.contextmanager
def _process(
    argv: list[str], port: int, what: str, log: Path, cwd: Path | None = None
) -> Iterator[None]:
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("ab") as out:
        proc = subprocess.Popen(
            argv, stdout=out, stderr=subprocess.STDOUT, start_new_session=True, cwd=cwd
        )
    try:
        _wait_open(port, proc, what, log)
        print(f"SOAK started {what} (pid {proc.pid}) on {HOST}:{port}", flush=True)
        yield
    finally:
        _stop(proc)
        print(f"SOAK stopped {what} (pid {proc.pid})", flush=True)


@contextlib.contextmanager
def es_stand_in(root: Path) -> Iterator[str]:
    """The Elasticsearch stand-in on a free port; yields its URL."""
    port = free_port()
    argv = [sys.executable, "-m", "tests.support.es_server", "--port", str(port)]
    with _process(argv, port, "Elasticsearch stand-in (tests/support/es_server/)", root / "es.log"):
        yield f"http://{HOST}:{port}"


def _home_service(root: Path, name: str, timeout: float) -> int:
    """Start the local service ``name`` of the home ``root.parent`` (``root`` is its
    ``soak/``) unless it is up, in a subprocess with that home; return its port."""
    env = dict(os.environ, EXACTLYONCE_HOME=str(root.parent))
    code = (
        "from exactlyonce.integration.lab.services import port, up; "
        f"up([{name!r}]); print(port({name!r}))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True,
        timeout=timeout, check=False,
    )  # fmt: skip
    if done.returncode != 0:
        raise SystemExit(f"soak: the local service {name} did not start:\n{done.stderr[-2000:]}")
    return int(done.stdout.strip().splitlines()[-1])


@contextlib.contextmanager
def opensearch_node(root: Path) -> Iterator[str]:
    """The OpenSearch sink's server: the genuine OpenSearch node of the home ``root.parent``
    (service ``opensearch``: its jars from Maven Central, data on disk), started if it is not
    up; yields its URL. Left running: chaos restarts it as a local service of that home, hard
    and clean, as the sink's own server."""
    port = _home_service(root, "opensearch", OPENSEARCH_TIMEOUT_S)
    print(f"SOAK the OpenSearch node (opensearch) of {root.parent} is up on {HOST}:{port}")
    yield f"http://{HOST}:{port}"


@contextlib.contextmanager
def sink_redis(root: Path) -> Iterator[str]:
    """The Redis sink's server: the persistent Redis (``redis-aof``: AOF, fsync always) of
    the home ``root.parent``, started if it is not up; yields its URL. Left running: chaos
    restarts it as a local service of that home, hard and clean, as the sink's own server."""
    port = _home_service(root, "redis-aof", START_TIMEOUT_S * 2)
    print(f"SOAK the persistent Redis (redis-aof) of {root.parent} is up on {HOST}:{port}")
    yield f"redis://{HOST}:{port}/0"


_KAFKA3_UP = (
    "from exactlyonce.integration.lab.services import kafka_cluster, up; "
    "up(['kafka3']); print(kafka_cluster.bootstrap())"
)
KAFKA3_TIMEOUT_S = 300.0


@contextlib.contextmanager
def kafka3_cluster(root: Path) -> Iterator[str]:
    """The 3-node Kafka cluster of the home ``root.parent`` (``root`` is its ``soak/``),
    started if it is not up (its ports: ``EXACTLYONCE_KAFKA3_PORT``, else the home's
    ``ports.json``, else 19100); yields its bootstrap servers. Left running: chaos restarts
    its nodes as local services of that home."""
    env = dict(os.environ, EXACTLYONCE_HOME=str(root.parent))
    done = subprocess.run(
        [sys.executable, "-c", _KAFKA3_UP], env=env, capture_output=True, text=True,
        timeout=KAFKA3_TIMEOUT_S, check=False,
    )  # fmt: skip
    if done.returncode != 0:
        raise SystemExit(f"soak: the 3-node Kafka cluster did not start:\n{done.stderr[-2000:]}")
    bootstrap = done.stdout.strip().splitlines()[-1]
    print(f"SOAK the 3-node Kafka cluster (kafka3) of {root.parent} is up at {bootstrap}")
    yield bootstrap


SINK_SERVERS: dict[str, Callable[[Path], contextlib.AbstractContextManager[str]]] = {
    "es": es_stand_in,
    "os": opensearch_node,
    "redis": sink_redis,
    "kafka3": kafka3_cluster,
}
SINK_SERVER_ENV = {
    "es": "SOAK_ES_URL",
    "os": "SOAK_OPENSEARCH_URL",
    "redis": "SOAK_SINK_REDIS_URL",
    "kafka3": "SOAK_KAFKA3_BOOTSTRAP",
}
