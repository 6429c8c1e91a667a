"""The local Redis: ``redis-server`` with no persistence, under ``<home>/redis``.

It starts empty every time. The binary is not installed here: ``make services`` (its
``system-packages`` step) or the user does that.
"""

from __future__ import annotations

import contextlib
import shutil
import socket
from pathlib import Path

from exactlyonce.integration.lab.services.env import HOST, port, port_taken
from exactlyonce.integration.lab.services.processes import (
    adopt_running,
    log_tail,
    pid_alive,
    read_pid,
    run,
    signal_and_wait,
    tcp_open,
    wait_until,
)

PROCESS_NAME = "redis-server"


def require_binary() -> str:
    """The path of ``redis-server``; raises naming the package to install if missing."""
    binary = shutil.which("redis-server")
    if binary is None:
        raise RuntimeError(
            "redis-server not found: apt-get install -y redis-server, or run `make services`"
        )
    return binary


def paths(home: Path) -> tuple[Path, Path, Path]:
    """(dir, pid file, log file)."""
    base = home / "redis"
    return base, base / "redis.pid", base / "redis.log"


def pid(home: Path) -> int | None:
    """The pid from the pid file (it may be stale)."""
    return read_pid(paths(home)[1])


def _command(command: bytes, timeout: float = 2.0) -> bytes:
    """Send one inline command to the local Redis and return what it answers before closing
    or within ``timeout`` (a raw socket: no client-side retries that would slow probes)."""
    with socket.create_connection((HOST, port("redis")), timeout=timeout) as conn:
        conn.sendall(command + b"\r\n")
        try:
            return conn.recv(256)
        except (TimeoutError, ConnectionResetError):
            return b""


def answers() -> bool:
    """True if the local Redis answers PING."""
    try:
        return _command(b"PING").startswith(b"+PONG")
    except OSError:
        return False


def start(home: Path) -> None:
    """Start Redis unless it runs; return once it answers."""
    binary = require_binary()
    base, pidfile, log = paths(home)
    if adopt_running("redis", pidfile, PROCESS_NAME, answers, log):
        return
    if tcp_open(port("redis")):
        port_taken("redis", home)
    base.mkdir(parents=True, exist_ok=True)
    argv = [binary, "--port", str(port("redis")), "--bind", HOST, "--save", ""]
    argv += ["--appendonly", "no", "--daemonize", "yes", "--pidfile", str(pidfile)]
    argv += ["--logfile", str(log), "--dir", str(base)]
    result = run(argv, new_session=True, timeout=30)
    if result.returncode != 0:
        raise RuntimeError(
            f"redis-server did not start (exit {result.returncode}): "
            f"{(result.stdout + result.stderr).strip()}\nlog {log}:\n{log_tail(log)}"
        )
    wait_until("redis", answers, log)


def stop(home: Path) -> None:
    """Stop Redis (SHUTDOWN NOSAVE, then signals); it keeps nothing."""
    _, pidfile, _ = paths(home)
    running = read_pid(pidfile)
    if running is None or not pid_alive(running, PROCESS_NAME):
        pidfile.unlink(missing_ok=True)
        return
    with contextlib.suppress(OSError):
        _command(b"SHUTDOWN NOSAVE", timeout=5)
    signal_and_wait(running, PROCESS_NAME, timeout=10)
    pidfile.unlink(missing_ok=True)
