"""A private PostgreSQL server for tests that restart it under a running job.

The shared server (``make services``) serves every other test and must never stop; a test
that SIGKILLs or restarts PostgreSQL starts its own cluster with
:mod:`exactlyonce.integration.lab.services.postgres` under a home of its own, on a free port, and
restarts that one: ``hard`` (SIGKILL of the postmaster and every backend, as a crash of the
server; the next start runs crash recovery) or ``clean`` (``pg_ctl stop -m fast``: sessions
are cut, the shutdown checkpoint is written). Every restart is counted, pids before and after.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from exactlyonce.integration.lab.chaos import servers
from exactlyonce.integration.lab.services import postgres
from exactlyonce.integration.lab.services.env import HOST, PG_DB, PG_PASSWORD, PG_USER, PORT_ENV
from exactlyonce.integration.lab.services.processes import pid_alive
from tests.support.private_kafka import free_port


@dataclass
class Restart:
    kind: str  # "hard" (SIGKILL of every server process) or "clean" (pg_ctl stop -m fast)
    where: str  # what the job was doing
    old_pid: int
    new_pid: int
    down_s: float  # from the signal until the server answered again


@dataclass
class PrivatePostgres:
    """One cluster under ``home`` on ``port``, with the services' role and password."""

    home: Path
    port: int = field(default_factory=free_port)
    restarts: list[Restart] = field(default_factory=list)

    @property
    def dsn(self) -> str:
        return f"postgresql://{PG_USER}:{PG_PASSWORD}@{HOST}:{self.port}/{PG_DB}"

    @contextlib.contextmanager
    def _port(self) -> Iterator[None]:
        """The postgres module reads its port from the environment: set it for one call."""
        saved = os.environ.get(PORT_ENV["pg"])
        os.environ[PORT_ENV["pg"]] = str(self.port)
        try:
            yield
        finally:
            if saved is None:
                os.environ.pop(PORT_ENV["pg"], None)
            else:
                os.environ[PORT_ENV["pg"]] = saved

    def start(self) -> int:
        """Start it (initdb the first time); return the postmaster's pid."""
        with self._port():
            postgres.start(self.home)
        running = postgres.pid(self.home)
        assert running is not None and pid_alive(running, postgres.PROCESS_NAME)
        return running

    def stop(self) -> None:
        with self._port():
            postgres.stop(self.home)

    def remove(self) -> None:
        """Stop it and delete its data (which may live under /var/tmp, see postgres._base)."""
        self.stop()
        with self._port():
            data, _, sock = postgres.paths(self.home)
        shutil.rmtree(data.parent, ignore_errors=True)
        shutil.rmtree(sock, ignore_errors=True)

    def restart(self, kind: str, where: str) -> Restart:
        """Crash (``hard``: SIGKILL of the server's process group) or cleanly stop
        (``clean``) the server while clients use it, wait until it is gone, start it again on
        its data: what ``exactlyonce chaos`` does to a local server."""
        assert kind in ("hard", "clean"), kind
        with self._port():
            done = servers.restart("pg", hard=kind == "hard", down_s=0.0, home=self.home)
        restart = Restart(kind, where, done.old_pid, done.new_pid, done.down_s)
        self.restarts.append(restart)
        print(f"postgres restart {len(self.restarts)}: {restart}", flush=True)
        return restart
