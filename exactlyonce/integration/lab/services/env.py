"""Where the local services are: home directory, ports, the env file, and masking for print.

Everything (data, logs, pid files, sockets) lives under one directory: ``EXACTLYONCE_HOME``,
default ``<cwd>/.exactlyonce``. Each service listens on 127.0.0.1 only, on the port set by
its ``EXACTLYONCE_*_PORT`` variable, else the one ``up`` chose when the default was taken
(``<home>/ports.json``), else the default. After ``up``, ``<home>/services.env`` holds the
addresses (:func:`local_env`); :mod:`exactlyonce.integration.envfile` writes and reads it, and
the same variables in the environment win.
"""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path
from urllib.parse import urlsplit

from exactlyonce.integration.envfile import home_dir

# Started by ``up`` when no names are given; ``tansu`` (a Kafka-protocol broker that does not
# hide aborted records), ``kafka3`` (a 3-node Kafka cluster, for failover), ``redis-aof``
# (a Redis with an append-only file, for a Redis sink whose server is restarted) and
# ``opensearch`` (a genuine OpenSearch node, for an OpenSearch sink whose server is restarted)
# and ``es-stand-in`` (the durable Elasticsearch stand-in, for an Elasticsearch sink whose server
# is restarted) only when named.
SERVICES: tuple[str, ...] = ("pg", "redis", "kafka")
KNOWN_SERVICES: tuple[str, ...] = (
    *SERVICES,
    "tansu",
    "kafka3",
    "redis-aof",
    "opensearch",
    "es-stand-in",
)
HOST = "127.0.0.1"
DEFAULT_PORTS: dict[str, int] = {
    "pg": 54329,
    "redis": 63790,
    "kafka": 19092,
    "kafka-controller": 19093,
    "tansu": 19094,
    "kafka3": 19100,  # the first of a block of 9 (kafka_cluster.block_ports)
    "redis-aof": 63791,
    "opensearch": 19200,
    "opensearch-transport": 19300,
    "es-stand-in": 19201,
}
PORT_ENV: dict[str, str] = {
    "pg": "EXACTLYONCE_PG_PORT",
    "redis": "EXACTLYONCE_REDIS_PORT",
    "kafka": "EXACTLYONCE_KAFKA_PORT",
    "kafka-controller": "EXACTLYONCE_KAFKA_CONTROLLER_PORT",
    "tansu": "EXACTLYONCE_TANSU_PORT",
    "kafka3": "EXACTLYONCE_KAFKA3_PORT",
    "redis-aof": "EXACTLYONCE_REDIS_AOF_PORT",
    "opensearch": "EXACTLYONCE_OPENSEARCH_PORT",
    "opensearch-transport": "EXACTLYONCE_OPENSEARCH_TRANSPORT_PORT",
    "es-stand-in": "EXACTLYONCE_ES_STAND_IN_PORT",
}
PORTS_FILE = "ports.json"
PG_USER = PG_DB = "exactlyonce"
# Not the package name: a secret that is also a common word would be masked out of messages.
PG_PASSWORD = "eo-local-pw"
MASK = "***"


def port(name: str) -> int:
    """The TCP port of service ``name``: its ``EXACTLYONCE_*_PORT`` variable, else the port
    ``up`` chose when the default was taken (``<home>/ports.json``), else the default."""
    raw = os.environ.get(PORT_ENV[name])
    if not raw:
        return _chosen_ports().get(name, DEFAULT_PORTS[name])
    try:
        value = int(raw)
    except ValueError:
        raise RuntimeError(f"{PORT_ENV[name]}={raw!r} is not a port number") from None
    if not 0 < value < 65536:
        raise RuntimeError(f"{PORT_ENV[name]}={raw!r} is not a port number")
    return value


def _chosen_ports() -> dict[str, int]:
    path = home_dir() / PORTS_FILE
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return {k: int(v) for k, v in data.items() if k in DEFAULT_PORTS and isinstance(v, int)}


def port_taken(name: str, home: Path) -> None:
    """The port is held by a process that is not this checkout's service.

    With the port set explicitly, that is an error. With the default (another checkout's
    services, say), pick a free port instead and remember it in ``<home>/ports.json``, so this
    checkout's services, tests and env file keep using it.
    """
    if os.environ.get(PORT_ENV[name]):
        raise RuntimeError(f"port {port(name)} is taken by another process; set {PORT_ENV[name]}")
    taken = port(name)
    with socket.socket() as s:
        s.bind((HOST, 0))
        free = int(s.getsockname()[1])
    chosen = {**_chosen_ports(), name: free}
    if home.absolute() == home_dir():
        (home / PORTS_FILE).write_text(json.dumps(chosen), encoding="utf-8")
    os.environ[PORT_ENV[name]] = str(free)
    print(f"{name}: port {taken} is taken by another process; using {free}", flush=True)


def local_env() -> dict[str, str]:
    """The env-file values for the local processes on the configured ports."""
    return {
        "EXACTLYONCE_PG_DSN": (f"postgresql://{PG_USER}:{PG_PASSWORD}@{HOST}:{port('pg')}/{PG_DB}"),
        "EXACTLYONCE_REDIS_URL": f"redis://{HOST}:{port('redis')}/0",
        "KAFKA_BOOTSTRAP_SERVERS": f"{HOST}:{port('kafka')}",
    }


def mask_dsn(dsn: str) -> str:
    """The DSN with its password replaced by ``***``; safe to print or log."""
    try:
        parts = urlsplit(dsn)
        password = parts.password
    except ValueError:
        return "<unparsable connection string>"
    if password is None:
        return dsn
    userinfo, _, hostport = parts.netloc.rpartition("@")
    user = userinfo.partition(":")[0]
    return parts._replace(netloc=f"{user}:{MASK}@{hostport}").geturl()


def describe(values: dict[str, str]) -> list[str]:
    """Human lines saying where each service listens; the PostgreSQL password is masked."""
    return [
        f"postgres: {mask_dsn(values['EXACTLYONCE_PG_DSN'])}",
        f"redis:    {values['EXACTLYONCE_REDIS_URL']}",
        f"kafka:    {values['KAFKA_BOOTSTRAP_SERVERS']}",
    ]
