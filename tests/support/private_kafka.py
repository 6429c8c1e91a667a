"""A private genuine Apache Kafka broker for tests that bounce it.

The shared broker (``make services``) serves every other test and must never stop; a test
that SIGKILLs or restarts a broker starts its own with
:mod:`exactlyonce.integration.lab.services.kafka` under a home of its own, on free ports, and
bounces that one: hard (SIGKILL, then start again on the same data) or soft (SIGTERM, a clean
shutdown, then start). Every bounce is counted, with the pids before and after.
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import socket
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from exactlyonce.integration.lab.services import kafka
from exactlyonce.integration.lab.services.env import HOST, PORT_ENV
from exactlyonce.integration.lab.services.processes import pid_alive, tcp_open

FIRST_STARTS = 3
PORT_TAKEN = "Address already in use"  # the broker's BindException, in the log tail


def free_port() -> int:
    """A TCP port nobody holds now, below the kernel's ephemeral range: while the broker is
    down its clients keep reconnecting, and a connect whose ephemeral source port equals the
    broker's port would connect to itself (TCP simultaneous open) and hold the port."""
    low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    for _ in range(100):
        candidate = random.randrange(20_000, min(low, 32_768))
        with socket.socket() as s:
            try:
                s.bind((HOST, candidate))
            except OSError:
                continue
            return candidate
    raise RuntimeError("no free port below the ephemeral range")


def two_free_ports() -> tuple[int, int]:
    """Two different :func:`free_port` choices (the broker's and its controller's)."""
    first = free_port()
    second = free_port()
    while second == first:
        second = free_port()
    return first, second


@dataclass
class Bounce:
    kind: str  # "hard" (SIGKILL) or "soft" (SIGTERM)
    where: str  # what the job was doing
    old_pid: int
    new_pid: int
    down_s: float  # from the signal until the broker answered again


@dataclass
class PrivateKafka:
    """One broker under ``home`` on ``port`` (clients) and ``controller_port``."""

    home: Path
    # free_port looked up at each call, not bound here: the unit tests replace it
    port: int = field(default_factory=lambda: free_port())
    controller_port: int = field(default_factory=lambda: free_port())
    bounces: list[Bounce] = field(default_factory=list)

    def __post_init__(self) -> None:
        while self.controller_port == self.port:
            self.controller_port = free_port()

    @property
    def bootstrap(self) -> str:
        return f"{HOST}:{self.port}"

    @contextlib.contextmanager
    def _ports(self) -> Iterator[None]:
        """The kafka module reads its ports from the environment: set them for one call."""
        names = {"kafka": self.port, "kafka-controller": self.controller_port}
        saved = {PORT_ENV[n]: os.environ.get(PORT_ENV[n]) for n in names}
        os.environ.update({PORT_ENV[n]: str(p) for n, p in names.items()})
        try:
            yield
        finally:
            for key, value in saved.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value

    def start(self) -> int:
        """Start it (resolving nothing twice: jars are cached); return its pid."""
        with self._ports():
            kafka.start(self.home)
        running = kafka.pid(self.home)
        assert running is not None and pid_alive(running, kafka.PROCESS_NAME)
        return running

    def start_new(self) -> int:
        """The first start: when a port chosen free was taken by another process before the
        broker bound it (tests on other workers choose ports too), again on new ports (its
        storage is formatted anew for them); any other failure, or :data:`FIRST_STARTS`
        takes in a row, is raised. Restarts (:meth:`bounce`) keep the ports."""
        for attempt in range(1, FIRST_STARTS + 1):
            try:
                return self.start()
            except RuntimeError as exc:
                if PORT_TAKEN not in str(exc) or attempt == FIRST_STARTS:
                    raise
                taken = (self.port, self.controller_port)
                self.port, self.controller_port = two_free_ports()
                print(f"ports {taken} taken meanwhile; the broker starts on "
                      f"{(self.port, self.controller_port)}", flush=True)  # fmt: skip
        raise AssertionError("unreachable")

    def stop(self) -> None:
        kafka.stop(self.home)

    def bounce(self, kind: str, where: str) -> Bounce:
        """SIGKILL (``hard``) or SIGTERM (``soft``) the broker, wait until it is gone, start it
        again on its data; the bounce is recorded."""
        old = kafka.pid(self.home)
        assert old is not None and pid_alive(old, kafka.PROCESS_NAME), "the broker is not up"
        began = time.monotonic()
        assert kind in ("hard", "soft"), kind
        # soft: SIGTERM only, a controlled shutdown; it must end by itself (no SIGKILL after).
        os.kill(old, signal.SIGKILL if kind == "hard" else signal.SIGTERM)
        self._wait_gone(old)
        new = self.start()
        assert new != old
        done = Bounce(kind, where, old, new, time.monotonic() - began)
        self.bounces.append(done)
        print(f"broker bounce {len(self.bounces)}: {done}", flush=True)
        return done

    def _wait_gone(self, old: int) -> None:
        """Until the old process is reaped or a zombie and its ports are closed. Not by its
        name: an exiting process's command line is empty before its sockets are closed, and
        a start in that moment found the port still taken (seen here)."""
        deadline = time.monotonic() + 60
        while pid_alive(old) or tcp_open(self.port) or tcp_open(self.controller_port):
            assert time.monotonic() < deadline, f"the broker {old} did not go away"
            time.sleep(0.05)
