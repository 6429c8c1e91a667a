"""A private genuine Apache Kafka broker for tests that bounce it.

The shared broker (``make services``) serves every other test and must never stop; a test
that SIGKILLs or restarts a broker starts its own with
:mod:`exactlyonce.integration.services.kafka` under a home of its own, on free ports, and
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

from exactlyonce.integration.services import kafka
from exactlyonce.integration.services.env import HOST, PORT_ENV
from exactlyonce.integration.services.processes import pid_alive


def free_port() -> int:
    """A TCP port nobody holds now, below the kernel's ephemeral range. Not one the kernel
    picks: while the broker is down, its clients keep reconnecting, and a connect from an
    ephemeral port equal to the broker's connects to itself (TCP simultaneous open) and
    holds the port, so the broker could not start again (seen here)."""
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
    port: int = field(default_factory=free_port)
    controller_port: int = field(default_factory=free_port)
    bounces: list[Bounce] = field(default_factory=list)

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

    def stop(self) -> None:
        kafka.stop(self.home)

    def bounce(self, kind: str, where: str) -> Bounce:
        """SIGKILL (``hard``) or SIGTERM (``soft``) the broker, wait until it is gone, start it
        again on its data; the bounce is recorded."""
        old = kafka.pid(self.home)
        assert old is not None and pid_alive(old, kafka.PROCESS_NAME), "the broker is not up"
        began = time.monotonic()
        if kind == "hard":
            os.kill(old, signal.SIGKILL)
            deadline = time.monotonic() + 30
            while pid_alive(old, kafka.PROCESS_NAME):
                assert time.monotonic() < deadline, "the SIGKILLed broker did not exit"
                time.sleep(0.05)
        else:
            assert kind == "soft", kind
            self.stop()  # SIGTERM: a controlled shutdown
            assert not pid_alive(old, kafka.PROCESS_NAME)
        new = self.start()
        assert new != old
        done = Bounce(kind, where, old, new, time.monotonic() - began)
        self.bounces.append(done)
        print(f"broker bounce {len(self.bounces)}: {done}", flush=True)
        return done
