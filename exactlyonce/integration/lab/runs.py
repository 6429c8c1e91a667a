"""Runs of ``exactlyonce run`` as processes: start one in its own process group (its output
echoed under a label), read the sink's head to see it progress, SIGKILL the whole group.
Shared by ``make demo`` and ``exactlyonce chaos``."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Protocol

from exactlyonce.integration.lab.echo import echo
from exactlyonce.integration.lab.services.processes import START_POLL, poll_until
from exactlyonce.progress import Progress

IDLE_SECONDS = 15
RUN_TIMEOUT_SECONDS = 300
NO_HEAD = -1  # the head before the first commit
_LIVE: set[subprocess.Popen[str]] = set()  # runs started and not yet reaped


class _Epoch(Protocol):
    @property
    def epoch(self) -> int: ...


class HasHead(Protocol):
    """What a run's progress is read from: a sink (its head), or the control's Spark commit
    log (:class:`exactlyonce.integration.lab.chaos.harness.SparkCommits`)."""

    def head(self) -> _Epoch | None: ...


def head_epoch(sink: HasHead) -> int:
    """The sink's committed head (its table of heads, or its control topic), -1 before the
    first commit. Read from the service every time."""
    head = sink.head()
    return NO_HEAD if head is None else head.epoch


def head_epoch_or_none(sink: HasHead) -> int | None:
    """:func:`head_epoch`, or None while the sink's server does not answer (a restart): each
    sink's client raises its own errors then (psycopg's, redis-py's, ...), so any error."""
    try:
        return head_epoch(sink)
    except Exception:  # a poll: the next one reads again
        return None


def start_run(
    config: str,
    log_path: Path,
    label: str,
    progress: Progress | None = None,
    env: Mapping[str, str] | None = None,
    command: Sequence[str] | None = None,
) -> subprocess.Popen[str]:
    """``exactlyonce run`` in a new session; its progress lines are echoed (each batch's rows
    counted in ``progress``), stderr logged. ``env`` is added to this process's environment
    (a crash point, say); ``command`` (the arguments after the interpreter) runs instead of
    ``exactlyonce run`` (the negative control's runs)."""
    run_env = {
        **os.environ,
        "PYSPARK_PYTHON": sys.executable,
        "PYSPARK_DRIVER_PYTHON": sys.executable,
        **(env or {}),
    }
    if command is None:
        cmd = [sys.executable, "-m", "exactlyonce.integration.cli", "run", config]
        cmd += ["--until-idle", str(IDLE_SECONDS)]
    else:
        cmd = [sys.executable, *command]
    with open(log_path, "w", encoding="utf-8") as log:
        proc = subprocess.Popen(
            cmd,
            stdout=subprocess.PIPE,
            stderr=log,
            text=True,
            env=run_env,
            start_new_session=True,
        )
    _LIVE.add(proc)
    threading.Thread(target=echo, args=(proc, label, progress), daemon=True).start()
    return proc


def wait_for_new_epoch(
    sink: HasHead, proc: subprocess.Popen[str], after: int, timeout: float
) -> int | None:
    """The head once it passes ``after``; None if the run ended or timed out first.

    A poll (every 0.2 s, up to ``timeout`` seconds), not a retry: a head that cannot be read
    (its server restarting) counts as not passed yet."""
    passed: list[int] = []

    def passed_or_ended() -> bool:
        if proc.poll() is not None:
            return True
        epoch = head_epoch_or_none(sink)
        if epoch is not None and epoch > after:
            passed.append(epoch)
            return True
        return False

    poll_until(passed_or_ended, START_POLL.replace(deadline_s=timeout))
    return passed[0] if passed else None


def kill_group(proc: subprocess.Popen[str]) -> None:
    """SIGKILL ``proc``'s whole session: its process group (the CLI, Spark's JVM) and the
    processes of the session in groups of their own (PySpark's daemon puts itself and its
    Python workers in a new group)."""
    with contextlib.suppress(ProcessLookupError):  # the group is gone (the run ended)
        os.killpg(proc.pid, signal.SIGKILL)
    for pid in session_members(proc.pid):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    proc.wait()
    _LIVE.discard(proc)


def session_members(sid: int) -> list[int]:
    """The live processes of session ``sid`` (from /proc; none where it cannot be read)."""
    members = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rpartition(")")[2].split()
        except OSError:
            continue  # gone meanwhile
        if len(fields) > 3 and int(fields[3]) == sid and fields[0] != "Z":
            members.append(int(stat.parent.name))
    return members


def reap(proc: subprocess.Popen[str], timeout: float) -> int:
    """Wait for ``proc`` to end (``subprocess.TimeoutExpired`` after ``timeout``), forget
    it, and return its exit code."""
    code = proc.wait(timeout=timeout)
    _LIVE.discard(proc)
    return code


def kill_all() -> None:
    """SIGKILL every run still going (a failed demo or chaos run leaves none behind)."""
    for proc in list(_LIVE):
        if proc.poll() is None:
            kill_group(proc)
        _LIVE.discard(proc)


def log_tail(log_path: Path, lines: int = 15) -> str:
    """The last ``lines`` lines of a run's log."""
    text = log_path.read_text(encoding="utf-8", errors="replace")
    return "\n".join(text.splitlines()[-lines:])
