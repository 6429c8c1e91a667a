"""A genuine OpenSearch 2.19.6 node as a plain process: the OpenSearch sink's tests run against
it, and exactlyonce/integration/lab/es_stand_in/ is checked against it.

There is no Elasticsearch server in any registry this project can reach (ENVIRONMENT.md), but
OpenSearch's server jars are on Maven Central. :func:`resolve` takes the class path of the
local service ``opensearch`` (:mod:`exactlyonce.integration.lab.services.opensearch`: the jars
of ``exactlyonce/integration/jars/opensearch-node.xml`` resolved with Maven and its
``OpenSearchNode.java`` compiled next to them, once). :class:`OpenSearchNode` runs one
single-node cluster of its own on loopback with free HTTP and transport ports, ``-Xmx512m``,
data in a temporary directory. :meth:`OpenSearchNode.kill` (SIGKILL) and
:meth:`OpenSearchNode.shut_down` (a clean close) end the process and keep its data;
:meth:`OpenSearchNode.start` brings it back on the same ports (the crash tests restart the node
mid-bulk).

Guarantees: a missing ``mvn``, ``java`` or ``javac``, a failed resolution or a node that does not
answer within :data:`START_TIMEOUT` raises :class:`OpenSearchUnavailable` with the reason
(and the node's last output); the fixture turns that into a test failure, never a skip. Only
Maven Central is contacted, and only when the cache lacks the jars or the pom changed.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from exactlyonce.integration.lab.services import opensearch as service

VERSION = service.VERSION
START_TIMEOUT = service.START_TIMEOUT_S


class OpenSearchUnavailable(RuntimeError):
    """The node could not be resolved or started; the message says why."""


@dataclass(frozen=True)
class Resolved:
    classpath: str
    jars: int
    megabytes: float
    seconds: float  # spent getting the class path (resolving and compiling the first time)


def resolve() -> Resolved:
    """The node's class path (jars and compiled main class), resolved on first use."""
    began = time.monotonic()
    try:
        classpath = service.node_classpath()
    except (RuntimeError, subprocess.TimeoutExpired, OSError) as exc:
        raise OpenSearchUnavailable(str(exc)) from None
    seconds = time.monotonic() - began
    jars = [Path(p) for p in classpath.split(os.pathsep) if p.endswith(".jar")]
    size = sum(j.stat().st_size for j in jars) / 1e6
    return Resolved(classpath, len(jars), size, seconds)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class OpenSearchNode:
    """One running node; :meth:`start` waits until it answers, :meth:`stop` ends it."""

    def __init__(self, resolved: Resolved) -> None:
        self.resolved = resolved
        self.home = Path(tempfile.mkdtemp(prefix="exactlyonce-opensearch-"))
        self.http_port = _free_port()
        self.transport_port = _free_port()
        self.start_seconds = 0.0
        self.exits: list[int] = []  # the return code of every ended process, in order
        self._proc: subprocess.Popen[bytes] | None = None
        self._log = self.home / "node.out"

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.http_port}"

    def start(self) -> OpenSearchNode:
        try:
            argv = service.node_argv(
                self.resolved.classpath, self.home, self.http_port, self.transport_port
            )
        except RuntimeError as exc:  # no java
            raise OpenSearchUnavailable(str(exc)) from None
        began = time.monotonic()
        with self._log.open("ab") as out:
            self._proc = subprocess.Popen(
                argv, stdin=subprocess.PIPE, stdout=out, stderr=subprocess.STDOUT
            )
        while not self._answers():
            if self._proc.poll() is not None:
                raise OpenSearchUnavailable(
                    f"the OpenSearch node exited with {self._proc.returncode}: {self._tail()}"
                )
            if time.monotonic() - began > START_TIMEOUT:
                self.stop()
                raise OpenSearchUnavailable(
                    f"the OpenSearch node did not answer within {START_TIMEOUT:.0f} s: "
                    f"{self._tail()}"
                )
            time.sleep(0.2)
        self.start_seconds = time.monotonic() - began
        return self

    def _answers(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.url}/_cluster/health", timeout=2) as resp:
                return str(json.load(resp).get("status")) in ("green", "yellow")
        except OSError:
            return False

    def _tail(self) -> str:
        try:
            return self._log.read_text(errors="replace")[-3000:]
        except OSError:
            return "(no output)"

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    def kill(self) -> int:
        """SIGKILL the node (a crash: nothing flushed, nothing closed); data stays. Returns
        the exit code (-9)."""
        proc, self._proc = self._proc, None
        assert proc is not None and proc.poll() is None, "the node is not running"
        proc.kill()
        self.exits.append(proc.wait(timeout=30))
        return self.exits[-1]

    def shut_down(self) -> int:
        """Close the node cleanly (its main class closes the node when stdin ends); data
        stays. Returns the exit code."""
        proc, self._proc = self._proc, None
        assert proc is not None and proc.poll() is None, "the node is not running"
        assert proc.stdin is not None
        proc.stdin.close()
        try:
            self.exits.append(proc.wait(timeout=60))
        except subprocess.TimeoutExpired:
            proc.kill()
            self.exits.append(proc.wait())
        return self.exits[-1]

    def stop(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            self.shut_down()
        shutil.rmtree(self.home, ignore_errors=True)


@pytest.fixture(scope="session")
def opensearch() -> Iterator[OpenSearchNode]:
    """A running OpenSearch node for the session; fails (never skips) when it cannot start."""
    try:
        resolved = resolve()
        node = OpenSearchNode(resolved).start()
    except (OpenSearchUnavailable, subprocess.TimeoutExpired) as exc:
        pytest.fail(f"cannot start OpenSearch {VERSION}: {exc}")
    print(
        f"\nOpenSearch {VERSION} at {node.url}: started in {node.start_seconds:.1f} s "
        f"({resolved.jars} jars, {resolved.megabytes:.0f} MB"
        + f", class path in {resolved.seconds:.1f} s"
        + ")"
    )
    yield node
    node.stop()
