"""The Redis SINK's own redis-server, apart from the catalog's Redis (services, port 63790).

It runs as a plain process on port 63795 (``EXACTLYONCE_SINK_REDIS_PORT``), in a temp dir,
with a password, and with ``appendonly yes`` + ``appendfsync always``: a sink's Redis must not
lose what it acknowledged, so a restart (even a SIGKILL) keeps every committed record. That
lets crash tests restart it alone, mid-run, without touching the catalog.

The AOF doubles as a write counter: every command that changed data is in it, including each
``HSET``/``SET``/``XADD`` a Lua script ran (Redis 7 replicates a script's effects). Automatic
AOF rewrites are off, so :meth:`SinkRedis.write_counts` sees every write ever made, across
restarts. A unique key hides a second write; the AOF does not.

The ``sink_redis`` fixture needs no import (``tests/conftest.py`` loads this module with
``pytest_plugins``). One server serves the whole session (a module-level singleton, shared by
every test module); it is SIGKILLed at exit.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import redis

HOST = "127.0.0.1"
DEFAULT_PORT = 63795
PASSWORD = "s3cret-sink-pw"  # a password the tests look for in every message and log


class SinkRedis:
    """One redis-server process for the sink; can be SIGKILLed and restarted on its data."""

    def __init__(
        self, directory: Path, port: int, password: str = PASSWORD, *, persistent: bool = True
    ) -> None:
        self.dir = directory
        self.port = port
        self.password = password
        self.proc: subprocess.Popen[bytes] | None = None
        self.restarts = 0
        self.dir.mkdir(parents=True, exist_ok=True)
        # The password lives in a config file, not on a command line that `ps` shows.
        (self.dir / "redis.conf").write_text(
            "\n".join(
                [
                    f"port {port}",
                    f"bind {HOST}",
                    f"dir {self.dir}",
                    'save ""',
                    # persistent=False: a restart starts EMPTY (a catalog's total loss).
                    "appendonly yes" if persistent else "appendonly no",
                    "appendfsync always",
                    "auto-aof-rewrite-percentage 0",
                    "aof-load-truncated yes",
                    f"requirepass {password}",
                    f"logfile {self.dir / 'redis.log'}",
                    "daemonize no",
                ]
            )
            + "\n"
        )

    @property
    def url(self) -> str:
        return f"redis://:{self.password}@{HOST}:{self.port}/0"

    def start(self, timeout: float = 30.0) -> None:
        self.proc = subprocess.Popen(
            ["redis-server", str(self.dir / "redis.conf")],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        deadline = time.monotonic() + timeout
        while True:
            try:
                with self.client(retries=0) as r:
                    r.ping()
                return
            except (redis.ConnectionError, redis.TimeoutError):
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    log = (self.dir / "redis.log").read_text(errors="replace")[-2000:]
                    raise RuntimeError(f"sink redis-server did not start:\n{log}") from None
                time.sleep(0.05)

    def kill(self) -> None:
        """SIGKILL: no shutdown save; only what the AOF fsynced survives."""
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=30)
        self.proc = None

    def restart(self, down_seconds: float = 1.0) -> None:
        self.kill()
        time.sleep(down_seconds)
        self.start()
        self.restarts += 1

    def client(self, retries: int = 3) -> Any:
        from redis.backoff import ExponentialBackoff
        from redis.retry import Retry

        return redis.Redis(
            host=HOST,
            port=self.port,
            password=self.password,
            socket_timeout=60,
            retry=Retry(ExponentialBackoff(cap=1.0, base=0.05), retries),
        )

    def cli(self, *args: str) -> str:
        """``redis-cli`` against the sink; the password goes by environment, never argv."""
        out = subprocess.run(
            ["redis-cli", "-h", HOST, "-p", str(self.port), "--no-raw", *args],
            env={**os.environ, "REDISCLI_AUTH": self.password},
            capture_output=True,
            text=True,
            timeout=120,
            check=True,
        )
        return out.stdout

    def cli_raw(self, *args: str) -> list[str]:
        out = subprocess.run(
            ["redis-cli", "-h", HOST, "-p", str(self.port), "--raw", *args],
            env={**os.environ, "REDISCLI_AUTH": self.password},
            capture_output=True,
            text=True,
            timeout=120,
            check=True,
        )
        return out.stdout.splitlines()

    # -- the AOF as a write counter ----------------------------------------------------

    def aof_commands(self) -> list[list[bytes]]:
        """Every command in the AOF's incremental files, in order (a torn tail is ignored)."""
        aof_dir = self.dir / "appendonlydir"
        manifest = next(aof_dir.glob("*.manifest")).read_text().splitlines()
        files = []
        for line in manifest:
            parts = line.split()
            fields = dict(zip(parts[0::2], parts[1::2], strict=False))
            if fields.get("type") == "i":
                files.append((int(fields["seq"]), fields["file"]))
        commands: list[list[bytes]] = []
        for _, name in sorted(files):
            commands.extend(parse_resp((aof_dir / name).read_bytes()))
        return commands

    def write_counts(self, command: str, key_prefix: str) -> Counter[str]:
        """How many times ``command`` (HSET, SET, XADD...) wrote each key under the prefix."""
        want, prefix = command.upper().encode(), key_prefix.encode()
        counts: Counter[str] = Counter()
        for cmd in self.aof_commands():
            if len(cmd) > 1 and cmd[0].upper() == want and cmd[1].startswith(prefix):
                counts[cmd[1].decode()] += 1
        return counts


def parse_resp(data: bytes) -> list[list[bytes]]:
    out: list[list[bytes]] = []
    pos, end = 0, len(data)
    while pos < end:
        if data[pos : pos + 1] != b"*":
            break
        eol = data.find(b"\r\n", pos)
        if eol < 0:
            break
        n = int(data[pos + 1 : eol])
        pos = eol + 2
        args: list[bytes] = []
        for _ in range(n):
            eol = data.find(b"\r\n", pos)
            if eol < 0 or data[pos : pos + 1] != b"$":
                return out
            size = int(data[pos + 1 : eol])
            start = eol + 2
            if start + size + 2 > end:
                return out
            args.append(data[start : start + size])
            pos = start + size + 2
        out.append(args)
    return out


def _port_free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind((HOST, port))
        except OSError:
            return False
    return True


def free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return int(s.getsockname()[1])


_SERVER: SinkRedis | None = None


def _stop_server() -> None:
    global _SERVER
    if _SERVER is not None:
        _SERVER.kill()
        with contextlib.suppress(OSError):
            shutil.rmtree(_SERVER.dir)
        _SERVER = None


def sink_redis_server() -> SinkRedis:
    """The session's sink server, started on first use."""
    global _SERVER
    if _SERVER is None or _SERVER.proc is None or _SERVER.proc.poll() is not None:
        port = int(os.environ.get("EXACTLYONCE_SINK_REDIS_PORT", DEFAULT_PORT))
        # Taken by another run, or pytest-xdist workers that would race for it: a free port.
        if os.environ.get("PYTEST_XDIST_WORKER") or not _port_free(port):
            port = free_port()
        directory = Path(tempfile.mkdtemp(prefix="eo-sink-redis-"))
        server = SinkRedis(directory, port)
        server.start()
        _SERVER = server
        atexit.register(_stop_server)
    return _SERVER


@pytest.fixture(name="sink_redis")
def sink_redis_fixture(services: dict[str, str]) -> SinkRedis:
    """The sink's Redis (after the catalog's services are known to run)."""
    server = sink_redis_server()
    if server.proc is None or server.proc.poll() is not None:
        server.start()
    return server
