"""The local Redis: ``redis-server`` with no persistence, under ``<home>/redis``.

It starts empty every time. The binary is not installed here: ``make services`` (its
``system-packages`` step) or the user does that. :mod:`.redis_aof` is the same server with
an append-only file (``appendfsync always``), as a Redis sink's server must have, started on
demand: the soak's Redis sink writes there, so chaos can restart the sink's own server.
"""

from __future__ import annotations

import contextlib
import shutil
import socket
from dataclasses import dataclass
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


@dataclass(frozen=True)
class RedisService:
    """One local ``redis-server``: the service ``name`` (its port and directory), with an
    append-only file (fsync at every write) when ``persistent``, else no persistence."""

    name: str
    persistent: bool

    def paths(self, home: Path) -> tuple[Path, Path, Path]:
        """(dir, pid file, log file)."""
        base = home / self.name
        return base, base / "redis.pid", base / "redis.log"

    def pid(self, home: Path) -> int | None:
        """The pid from the pid file (it may be stale)."""
        return read_pid(self.paths(home)[1])

    def command(self, command: bytes, timeout: float = 2.0) -> bytes:
        """Send one inline command and return what it answers before closing or within
        ``timeout`` (a raw socket: no client-side retries that would slow probes)."""
        with socket.create_connection((HOST, port(self.name)), timeout=timeout) as conn:
            conn.sendall(command + b"\r\n")
            try:
                return conn.recv(256)
            except (TimeoutError, ConnectionResetError):
                return b""

    def answers(self) -> bool:
        """True if it answers PING (and, persistent, has loaded its append-only file)."""
        try:
            return self.command(b"PING").startswith(b"+PONG")
        except OSError:
            return False

    def start(self, home: Path) -> None:
        """Start it unless it runs; return once it answers."""
        binary = require_binary()
        base, pidfile, log = self.paths(home)
        if adopt_running(self.name, pidfile, PROCESS_NAME, self.answers, log):
            return
        if tcp_open(port(self.name)):
            port_taken(self.name, home)
        base.mkdir(parents=True, exist_ok=True)
        argv = [binary, "--port", str(port(self.name)), "--bind", HOST, "--save", ""]
        if self.persistent:
            argv += ["--appendonly", "yes", "--appendfsync", "always"]
        else:
            argv += ["--appendonly", "no"]
        argv += ["--daemonize", "yes", "--pidfile", str(pidfile)]
        argv += ["--logfile", str(log), "--dir", str(base)]
        result = run(argv, new_session=True, timeout=30)
        if result.returncode != 0:
            raise RuntimeError(
                f"redis-server did not start (exit {result.returncode}): "
                f"{(result.stdout + result.stderr).strip()}\nlog {log}:\n{log_tail(log)}"
            )
        wait_until(self.name, self.answers, log)

    def stop(self, home: Path) -> None:
        """Stop it (SHUTDOWN NOSAVE, then signals); a persistent one keeps its append-only
        file, written at every write."""
        _, pidfile, _ = self.paths(home)
        running = read_pid(pidfile)
        if running is None or not pid_alive(running, PROCESS_NAME):
            pidfile.unlink(missing_ok=True)
            return
        with contextlib.suppress(OSError):
            self.command(b"SHUTDOWN NOSAVE", timeout=5)
        signal_and_wait(running, PROCESS_NAME, timeout=10)
        pidfile.unlink(missing_ok=True)


LOCAL = RedisService("redis", persistent=False)
paths, pid, answers, start, stop = LOCAL.paths, LOCAL.pid, LOCAL.answers, LOCAL.start, LOCAL.stop
_command = LOCAL.command
