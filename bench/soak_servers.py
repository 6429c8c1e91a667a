"""The soak's own servers, apart from the local services (``exactlyonce services``) that
chaos restarts:

- the Elasticsearch cell's server: there is no Elasticsearch server here, so the home's
  ``es-stand-in`` service (the lab's stand-in with its journal: what it acknowledged survives a
  SIGKILL), started here if it is not up and left running, so chaos restarts it (the sink's
  own server first: a hard and a clean restart per cell) beside the catalog's Redis;
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
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

HOST = "127.0.0.1"
START_TIMEOUT_S = 30.0
OPENSEARCH_TIMEOUT_S = 900.0  # the first start resolves its jars with Maven


def _home_service(root: Path, name: str, timeout: float, address: str = "") -> str:
    """Start the local service ``name`` of the home ``root.parent`` (``root`` is its
    ``soak/``) unless it is up, in a subprocess with that home; return what ``address`` (a
    Python expression over ``port`` and ``kafka_cluster``; default: its port) gives there."""
    env = dict(os.environ, EXACTLYONCE_HOME=str(root.parent))
    code = (
        "from exactlyonce.integration.lab.services import kafka_cluster, port, up; "
        f"up([{name!r}]); print({address or f'port({name!r})'})"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True,
        timeout=timeout, check=False,
    )  # fmt: skip
    if done.returncode != 0:
        raise SystemExit(f"soak: the local service {name} did not start:\n{done.stderr[-2000:]}")
    return done.stdout.strip().splitlines()[-1]


@contextlib.contextmanager
def es_stand_in(root: Path) -> Iterator[str]:
    """The Elasticsearch sink's server: the durable stand-in of the home ``root.parent``
    (service ``es-stand-in``: a journal fsynced before each reply), started if it is not up;
    yields its URL. Left running: chaos restarts it as a local service of that home, hard and
    clean, as the sink's own server. No Elasticsearch server is installable here."""
    port = _home_service(root, "es-stand-in", START_TIMEOUT_S * 2)
    print(f"SOAK the Elasticsearch stand-in (es-stand-in) of {root.parent} is up on {HOST}:{port}")
    yield f"http://{HOST}:{port}"


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


KAFKA3_TIMEOUT_S = 300.0


@contextlib.contextmanager
def kafka3_cluster(root: Path) -> Iterator[str]:
    """The 3-node Kafka cluster of the home ``root.parent`` (``root`` is its ``soak/``),
    started if it is not up (its ports: ``EXACTLYONCE_KAFKA3_PORT``, else the home's
    ``ports.json``, else 19100); yields its bootstrap servers. Left running: chaos restarts
    its nodes as local services of that home."""
    bootstrap = _home_service(root, "kafka3", KAFKA3_TIMEOUT_S, "kafka_cluster.bootstrap()")
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
