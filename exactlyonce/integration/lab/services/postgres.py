"""The local PostgreSQL: a private cluster (``initdb`` + ``pg_ctl``) under ``<home>/pg``.

Role, password and database ``exactlyonce``; the local socket is trusted, TCP logins need
the password. The cluster keeps its data across stop/start. As root, ``initdb`` and
``pg_ctl`` run as the ``postgres`` OS user (initdb refuses root). The server binaries are
not installed here: ``make services`` (its ``system-packages`` step) or the user does that.
"""

from __future__ import annotations

import hashlib
import shlex
import shutil
from pathlib import Path

from exactlyonce.integration.lab.services.env import (
    HOST,
    PG_DB,
    PG_PASSWORD,
    PG_USER,
    local_env,
    port,
    port_taken,
)
from exactlyonce.integration.lab.services.processes import (
    START_TIMEOUT_S,
    check,
    is_root,
    log_tail,
    pid_alive,
    read_pid,
    run,
    signal_and_wait,
    tcp_open,
    wait_until,
)

PROCESS_NAME = "postgres"
JDBC_JAR = Path("/usr/share/java/postgresql.jar")


def pg_bindir() -> Path | None:
    """The directory holding ``initdb``/``pg_ctl``: ``pg_config --bindir``, else the newest
    ``/usr/lib/postgresql/*/bin``, else the one of ``initdb`` on PATH; None if none."""
    candidates: list[Path] = []
    pg_config = shutil.which("pg_config")
    if pg_config:
        result = run([pg_config, "--bindir"], timeout=10)
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


def require_binaries() -> Path:
    """The server binaries' directory; raises naming the package to install if missing."""
    bindir = pg_bindir()
    if bindir is None:
        raise RuntimeError(
            "PostgreSQL server binaries (initdb, pg_ctl) not found: "
            "apt-get install -y postgresql, or run `make services`"
        )
    if not JDBC_JAR.is_file():  # only the benchmarks need it
        print(f"note: {JDBC_JAR} missing (benchmarks need `libpostgresql-jdbc-java`)")
    return bindir


def traversable_by_others(path: Path) -> bool:
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


def _base(home: Path) -> Path:
    """Where the PostgreSQL cluster lives: ``<home>/pg``, unless we run as root and the
    ``postgres`` OS user (initdb refuses root) cannot traverse to it. Then it is a
    per-project dir under /var/tmp, named by a hash of the home path, and ``up`` says so."""
    base = home / "pg"
    if not is_root() or (base / "data" / "PG_VERSION").exists() or traversable_by_others(home):
        return base
    digest = hashlib.sha1(str(home).encode()).hexdigest()[:12]
    return Path("/var/tmp") / f"exactlyonce-{digest}" / "pg"


def paths(home: Path) -> tuple[Path, Path, Path]:
    """(data dir, log file, socket dir). The socket dir is under the home dir unless the
    socket path would pass the 107-byte Unix limit; then it is a short dir under /tmp."""
    base = _base(home)
    sock = base / "sock"
    if len(str(sock / f".s.PGSQL.{port('pg')}.lock")) > 100:
        digest = hashlib.sha1(str(home).encode()).hexdigest()[:12]
        sock = Path("/tmp") / f"exactlyonce-pg-{digest}"
    return base / "data", base / "postgres.log", sock


def pid(home: Path) -> int | None:
    """The postmaster's pid from its pid file (it may be stale)."""
    return read_pid(paths(home)[0] / "postmaster.pid")


def answers(timeout: int = 3) -> bool:
    """True if the ``exactlyonce`` role can log in over TCP with its password."""
    import psycopg

    try:
        with psycopg.connect(local_env()["EXACTLYONCE_PG_DSN"], connect_timeout=timeout) as conn:
            conn.execute("SELECT 1")
        return True
    except psycopg.Error:
        return False


def _prepare_dirs(home: Path) -> None:
    """Create the pg folders; as root the data dir, log and socket dir belong to
    ``postgres`` (initdb refuses to run as root)."""
    data, log, sock = paths(home)
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
    if is_root():
        for path in (data, sock, log):
            shutil.chown(path, "postgres", "postgres")
        probe = run(["test", "-w", str(data)], as_postgres=True, cwd=Path("/"))
        if probe.returncode != 0:
            raise RuntimeError(
                f"the postgres OS user cannot reach {data}; put EXACTLYONCE_HOME on a path "
                "every user can traverse (e.g. under /tmp or the project directory)"
            )


def _initdb(bindir: Path, home: Path) -> None:
    """Create the cluster once (kept across restarts): local socket trusted, TCP needs the
    password."""
    data, _, _ = paths(home)
    if (data / "PG_VERSION").is_file():
        return
    print(f"initdb {data}", flush=True)
    argv = [str(bindir / "initdb"), "-D", str(data), "-U", "postgres", "-E", "UTF8"]
    argv += ["--no-locale", "--auth-local=trust", "--auth-host=scram-sha-256"]
    check(run(argv, as_postgres=is_root(), cwd=data.parent), "initdb")


def _ensure_role_and_db(home: Path) -> None:
    """Create role and database ``exactlyonce`` if missing, and (re)set the role's password
    (over the trusted socket). Idempotent."""
    import psycopg
    from psycopg import sql

    _, _, sock = paths(home)
    with psycopg.connect(
        host=str(sock),
        port=port("pg"),
        user="postgres",
        dbname="postgres",
        autocommit=True,
        connect_timeout=10,
    ) as conn:
        exists = conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (PG_USER,)).fetchone()
        verb = "ALTER" if exists else "CREATE"
        conn.execute(
            sql.SQL(verb + " ROLE {} WITH SUPERUSER LOGIN PASSWORD {}").format(
                sql.Identifier(PG_USER), sql.Literal(PG_PASSWORD)
            )
        )
        if not conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (PG_DB,)).fetchone():
            conn.execute(
                sql.SQL("CREATE DATABASE {} OWNER {}").format(
                    sql.Identifier(PG_DB), sql.Identifier(PG_USER)
                )
            )


def _pg_ctl_start(bindir: Path, home: Path) -> None:
    data, log, sock = paths(home)
    # fsync=off: only for the speed of local tests; a crash of the machine may corrupt this
    # throw-away cluster. Never use it for data you keep.
    options = ["-c", f"listen_addresses={HOST}", "-p", str(port("pg")), "-k", str(sock)]
    options += ["-c", "fsync=off", "-c", "max_connections=200"]
    argv = [str(bindir / "pg_ctl"), "-D", str(data), "-l", str(log), "-w"]
    argv += ["-t", str(int(START_TIMEOUT_S)), "-o", shlex.join(options), "start"]
    result = run(
        argv,
        as_postgres=is_root(),
        cwd=data.parent,
        new_session=True,
        timeout=START_TIMEOUT_S + 30,
    )
    if result.returncode != 0:
        raise RuntimeError(
            f"postgres did not start (pg_ctl exit {result.returncode}): "
            f"{(result.stdout + result.stderr).strip()}\nlog {log}:\n{log_tail(log)}"
        )


def _remove_stale_locks(home: Path) -> None:
    """The lock files of a postmaster that died without cleaning up (SIGKILL). PostgreSQL
    removes them itself unless their pid still exists: a killed postmaster whose parent
    (PID 1 here) has not reaped it yet is a zombie, and the next start would refuse."""
    data, _, sock = paths(home)
    (data / "postmaster.pid").unlink(missing_ok=True)
    lock = sock / f".s.PGSQL.{port('pg')}.lock"
    lock.unlink(missing_ok=True)
    (sock / lock.name.removesuffix(".lock")).unlink(missing_ok=True)


def start(home: Path) -> None:
    """Start the cluster unless it runs (creating it the first time); return once the
    ``exactlyonce`` role can log in over TCP."""
    bindir = require_binaries()
    data, log, _ = paths(home)
    running = pid(home)
    if running is not None and pid_alive(running, PROCESS_NAME):
        _ensure_role_and_db(home)  # first: it also sets the password TCP logins check
        wait_until("postgres", answers, log)
        return
    _prepare_dirs(home)
    _initdb(bindir, home)
    if running is not None:  # stale: the postmaster is gone (killed, or a zombie not reaped)
        _remove_stale_locks(home)
    if tcp_open(port("pg")):
        port_taken("pg", home)
    _pg_ctl_start(bindir, home)
    _ensure_role_and_db(home)
    wait_until("postgres", answers, log, pid=lambda: pid(home))


def stop(home: Path) -> None:
    """Stop the cluster (fast shutdown, then signals); its data is kept."""
    data, _, _ = paths(home)
    running = pid(home)
    if running is None or not pid_alive(running, PROCESS_NAME):
        (data / "postmaster.pid").unlink(missing_ok=True)
        return
    bindir = pg_bindir()
    if bindir is not None:
        run(
            [str(bindir / "pg_ctl"), "-D", str(data), "-m", "fast", "-w", "-t", "60", "stop"],
            as_postgres=is_root(),
            cwd=data.parent,
            timeout=90,
        )
    signal_and_wait(running, PROCESS_NAME)
