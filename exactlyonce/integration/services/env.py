"""Where the local services are: home directory, ports, the env file, and masking for print.

Everything (data, logs, pid files, sockets) lives under one directory: ``EXACTLYONCE_HOME``,
default ``<cwd>/.exactlyonce``. Each service listens on 127.0.0.1 only, on the port set by
its ``EXACTLYONCE_*_PORT`` variable, else the one ``up`` chose when the default was taken
(``<home>/ports.json``), else the default. After ``up``, ``<home>/services.env`` holds the
addresses; :func:`service_env` reads it, and the same variables in the environment win.
"""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path
from urllib.parse import urlsplit

# Started by ``up`` when no names are given; ``tansu`` (a Kafka-protocol broker that does not
# hide aborted records) only when named.
SERVICES: tuple[str, ...] = ("pg", "redis", "kafka")
KNOWN_SERVICES: tuple[str, ...] = (*SERVICES, "tansu")
HOST = "127.0.0.1"
DEFAULT_PORTS: dict[str, int] = {
    "pg": 54329,
    "redis": 63790,
    "kafka": 19092,
    "kafka-controller": 19093,
    "tansu": 19094,
}
PORT_ENV: dict[str, str] = {
    "pg": "EXACTLYONCE_PG_PORT",
    "redis": "EXACTLYONCE_REDIS_PORT",
    "kafka": "EXACTLYONCE_KAFKA_PORT",
    "kafka-controller": "EXACTLYONCE_KAFKA_CONTROLLER_PORT",
    "tansu": "EXACTLYONCE_TANSU_PORT",
}
ENV_KEYS: tuple[str, ...] = (
    "EXACTLYONCE_PG_DSN",
    "EXACTLYONCE_REDIS_URL",
    "KAFKA_BOOTSTRAP_SERVERS",
)
ENV_FILE = "services.env"
PORTS_FILE = "ports.json"
PG_USER = PG_DB = "exactlyonce"
# Not the package name: a secret that is also a common word would be masked out of messages.
PG_PASSWORD = "eo-local-pw"
MASK = "***"


def home_dir(home: Path | None = None) -> Path:
    """The absolute services directory: ``home``, else ``$EXACTLYONCE_HOME``, else
    ``<cwd>/.exactlyonce``. Not created here."""
    if home is None:
        home = Path(os.environ.get("EXACTLYONCE_HOME") or Path.cwd() / ".exactlyonce")
    return Path(home).expanduser().absolute()


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


def parse_env_file(text: str) -> dict[str, str]:
    """``KEY=value`` lines to a dict. Blank lines and ``#`` comments are skipped, an optional
    ``export`` prefix and one pair of surrounding quotes are removed; the value is kept
    verbatim otherwise (it may contain ``=``)."""
    values: dict[str, str] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("export "):
            line = line[len("export ") :].lstrip()
        key, sep, value = line.partition("=")
        if not sep or not key.strip():
            continue
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            value = value[1:-1]
        values[key.strip()] = value
    return values


def format_env_file(values: dict[str, str]) -> str:
    """The env file text: one ``KEY=value`` line per key, in the order given."""
    return "".join(f"{key}={value}\n" for key, value in values.items())


def write_env_file(values: dict[str, str], home: Path | None = None) -> Path:
    """Write ``<home>/services.env`` atomically (readers never see half a file)."""
    path = home_dir(home) / ENV_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{ENV_FILE}.{os.getpid()}")
    tmp.write_text(format_env_file(values))
    os.replace(tmp, path)
    return path


def service_env(home: Path | None = None) -> dict[str, str]:
    """Where the services are: the keys of :data:`ENV_KEYS`.

    Each value comes from ``os.environ`` when set there (non-empty), else from
    ``<home>/services.env``. Guaranteed to return every key of :data:`ENV_KEYS`; raises
    ``RuntimeError`` telling the user to run ``make services`` when one can be found in
    neither place.
    """
    path = home_dir(home) / ENV_FILE
    values: dict[str, str] = {}
    if path.is_file():
        values.update(parse_env_file(path.read_text()))
    for key in ENV_KEYS:
        if os.environ.get(key):
            values[key] = os.environ[key]
    missing = [key for key in ENV_KEYS if not values.get(key)]
    if missing:
        raise RuntimeError(
            f"services not configured: {', '.join(missing)} not set and {path} "
            f"{'lacks them' if path.is_file() else 'does not exist'}. Run `make services` "
            "(python -m exactlyonce.integration.services up), or export "
            f"{', '.join(ENV_KEYS)} to point at running services (e.g. docker compose)."
        )
    return {key: values[key] for key in ENV_KEYS}


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
