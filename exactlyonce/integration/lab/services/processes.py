"""Small process helpers for the local services: pids, commands, waiting, signals, spawning.

Nothing here knows a particular service; :class:`DetachedService` is the shape most of them
share (one detached process of ours, a pid file, a log, a readiness probe). Waiting (for a
service to answer, for a process to exit) polls with :class:`exactlyonce.retry.RetryPolicy`:
a fixed interval up to a deadline.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from exactlyonce.integration.lab.services.env import HOST, port, port_taken
from exactlyonce.retry import RetryPolicy

START_TIMEOUT_S = 60.0


class _NotYet(Exception):
    """The polled condition does not hold yet."""


def _not_yet(exc: BaseException) -> bool:
    return isinstance(exc, _NotYet)


# Poll every 0.2 s until the deadline; attempts are bounded by the deadline alone.
START_POLL = RetryPolicy(
    attempts=sys.maxsize, initial_s=0.2, max_s=0.2, deadline_s=START_TIMEOUT_S, transient=_not_yet
)
EXIT_POLL = START_POLL.replace(initial_s=0.1, max_s=0.1)


def poll_until(condition: Callable[[], bool], policy: RetryPolicy) -> bool:
    """True as soon as ``condition()`` is true, False once ``policy.deadline_s`` passed
    first. ``condition()`` is called at once, then after each of the policy's waits; an error
    it raises ends the wait and propagates."""

    def attempt() -> None:
        if not condition():
            raise _NotYet

    try:
        policy.call(attempt)
    except _NotYet:
        return False
    return True


def is_root() -> bool:
    return os.geteuid() == 0


def pid_alive(pid: int, name: str | None = None) -> bool:
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


def read_pid(path: Path) -> int | None:
    """The pid on the first line of ``path``, or None if absent or unreadable."""
    try:
        return int(path.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def tcp_open(port_: int, host: str = HOST, timeout: float = 1.0) -> bool:
    try:
        with socket.create_connection((host, port_), timeout=timeout):
            return True
    except OSError:
        return False


def log_tail(path: Path, lines: int = 20) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def run(
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


def check(result: subprocess.CompletedProcess[str], what: str) -> None:
    """Raise ``RuntimeError`` with the command's output if it failed."""
    if result.returncode != 0:
        out = (result.stdout + result.stderr).strip()
        raise RuntimeError(f"{what} failed (exit {result.returncode}):\n{out}")


def wait_until(
    name: str,
    probe: Callable[[], bool],
    log: Path,
    timeout: float = START_TIMEOUT_S,
    pid: Callable[[], int | None] | None = None,
) -> None:
    """Return once ``probe()`` is true; raise naming the service and its log otherwise, or at
    once if the process (``pid()``) died."""

    def ready() -> bool:
        if probe():
            return True
        if pid is not None and not pid_alive(pid() or -1):
            raise RuntimeError(f"{name} exited while starting; log {log}:\n{log_tail(log)}")
        return False

    if not poll_until(ready, START_POLL.replace(deadline_s=timeout)):
        raise RuntimeError(
            f"{name} did not answer within {timeout:.0f} s; log {log}:\n{log_tail(log)}"
        )


def adopt_running(
    label: str, pidfile: Path, process_name: str, probe: Callable[[], bool], log: Path
) -> bool:
    """True once the process ``pidfile`` names is alive (and ours) and answers ``probe``:
    nothing to start. False if it is not running; a stale pid file is then removed."""
    running = read_pid(pidfile)
    if running is not None and pid_alive(running, process_name):
        wait_until(label, probe, log)
        return True
    pidfile.unlink(missing_ok=True)
    return False


def signal_and_wait(pid: int, name: str, timeout: float = 15.0) -> None:
    """SIGTERM ``pid``, then SIGKILL if it is still alive after ``timeout`` seconds."""
    for sig, wait in ((signal.SIGTERM, timeout), (signal.SIGKILL, 5.0)):
        if not pid_alive(pid, name):
            break
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)
        poll_until(lambda: not pid_alive(pid, name), EXIT_POLL.replace(deadline_s=wait))


# Started through a short-lived Python parent, so the process is nobody's child here: it
# outlives the caller (a test run) without a zombie or a Popen left to wait for.
_SPAWN = """
import os, subprocess, sys
with open(sys.argv[1], "ab") as log:
    child = subprocess.Popen(sys.argv[3:], cwd=sys.argv[2], stdin=subprocess.DEVNULL,
                             stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
print(child.pid, flush=True)
os._exit(0)  # no finalizers: the child is meant to outlive this parent
"""


def spawn_detached(argv: Sequence[str], log: Path, cwd: Path) -> int:
    """Start ``argv`` in its own session, output appended to ``log``; return its pid."""
    result = run([sys.executable, "-c", _SPAWN, str(log), str(cwd), *argv], timeout=30)
    check(result, f"starting {argv[0]}")
    return int(result.stdout.strip())


@dataclass(frozen=True)
class DetachedService:
    """A local service run as one detached process of ours under ``<home>/<name>``: its pid
    in ``<name>.pid``, its output in ``<name>.log``. ``start`` adopts a running one (alive,
    ours by ``process_name`` in its command line, answering ``answers``), refuses when one of
    its ``ports`` is held by something else, and otherwise spawns the command ``argv(base)``
    gives (``argv`` may prepare the folder first: configs, a format, a build) and waits until
    it answers. ``stop`` is SIGTERM, then SIGKILL after ``stop_timeout`` seconds."""

    name: str  # the service: its default folder, its port, its messages
    process_name: str  # in its command line, so a recycled pid is not taken for it
    answers: Callable[[], bool]
    ports: tuple[str, ...] = ()  # the ports it listens on (default: the one named ``name``)
    start_timeout: float = START_TIMEOUT_S
    stop_timeout: float = 15.0

    def paths(self, home: Path) -> tuple[Path, Path, Path]:
        """(dir, pid file, log file)."""
        base = home / self.name
        return base, base / f"{self.name}.pid", base / f"{self.name}.log"

    def pid(self, home: Path) -> int | None:
        """The pid from the pid file (it may be stale)."""
        return read_pid(self.paths(home)[1])

    def start(self, home: Path, argv: Callable[[Path], Sequence[str]]) -> None:
        """Start it unless it runs, detached; return once it answers."""
        base, pidfile, log = self.paths(home)
        if adopt_running(self.name, pidfile, self.process_name, self.answers, log):
            return
        for name in self.ports or (self.name,):
            if tcp_open(port(name)):
                port_taken(name, home)
        base.mkdir(parents=True, exist_ok=True)
        command = argv(base)
        started = spawn_detached(command, log, cwd=base)
        pidfile.write_text(f"{started}\n")
        wait_until(self.name, self.answers, log, timeout=self.start_timeout, pid=lambda: started)

    def stop(self, home: Path) -> None:
        """SIGTERM (SIGKILL after ``stop_timeout`` s); what it keeps on disk stays."""
        _, pidfile, _ = self.paths(home)
        running = read_pid(pidfile)
        if running is not None:
            signal_and_wait(running, self.process_name, timeout=self.stop_timeout)
        pidfile.unlink(missing_ok=True)
