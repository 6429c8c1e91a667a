"""Runs of ``exactlyonce run``: start one in its own process group, wait until the sink's head
shows new epochs, SIGKILL the whole group, restart; the last run goes on until its query
ends (``available_now``: all input read) or is idle."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import NoReturn

from exactlyonce.connectors.base import ExactlyOnceSink
from exactlyonce.integration.config import PipelineConfig
from exactlyonce.integration.demo.echo import echo
from exactlyonce.integration.services.processes import START_POLL, poll_until
from exactlyonce.progress import Progress

IDLE_SECONDS = 15
RUN_TIMEOUT_SECONDS = 300
_LIVE: set[subprocess.Popen[str]] = set()  # runs started and not yet reaped


def head_epoch(sink: ExactlyOnceSink) -> int:
    """The sink's committed head (its table of heads, or its control topic), -1 before the
    first commit. Read from the service every time."""
    head = sink.head()
    return -1 if head is None else head.epoch


def start_run(
    config: str, log_path: Path, label: str, progress: Progress | None = None
) -> subprocess.Popen[str]:
    """``exactlyonce run`` in a new session; its progress lines are echoed (each batch's rows
    counted in ``progress``), stderr logged."""
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}
    cmd = [
        sys.executable,
        "-m",
        "exactlyonce.integration.cli",
        "run",
        config,
        "--until-idle",
        str(IDLE_SECONDS),
    ]
    with open(log_path, "w", encoding="utf-8") as log:
        proc = subprocess.Popen(
            cmd,
            stdout=subprocess.PIPE,
            stderr=log,
            text=True,
            env=env,
            start_new_session=True,
        )
    _LIVE.add(proc)
    threading.Thread(target=echo, args=(proc, label, progress), daemon=True).start()
    return proc


def wait_for_new_epoch(
    sink: ExactlyOnceSink, proc: subprocess.Popen[str], after: int, timeout: float
) -> int | None:
    """The head once it passes ``after``; None if the run ended or timed out first.

    A poll (every 0.2 s, up to ``timeout`` seconds), not a retry: an error reading the head
    propagates."""
    passed: list[int] = []

    def passed_or_ended() -> bool:
        if proc.poll() is not None:
            return True
        epoch = head_epoch(sink)
        if epoch > after:
            passed.append(epoch)
            return True
        return False

    poll_until(passed_or_ended, START_POLL.replace(deadline_s=timeout))
    return passed[0] if passed else None


def kill_group(proc: subprocess.Popen[str]) -> None:
    """SIGKILL ``proc``'s whole process group (the CLI, Spark's JVM and its Python workers)."""
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    _LIVE.discard(proc)


def kill_all() -> None:
    """SIGKILL every run still going (a failed demo leaves none behind)."""
    for proc in list(_LIVE):
        if proc.poll() is None:
            kill_group(proc)
        _LIVE.discard(proc)


def run_with_kills(
    cfg: PipelineConfig,
    config: str,
    kills: int,
    rng: random.Random,
    log_dir: Path,
    name: str,
    input_records: int | None = None,
) -> int:
    """Run, SIGKILL after new epochs ``kills`` times, then run until done or idle; kills done.

    ``name`` labels the runs' lines and log files (``<name>-run-1.log``). The committed
    batches' rows, over all runs, show as progress against ``input_records`` (a batch a
    kill cut short is read again, so it may end above 100%). A run that ends before
    committing, or a last run that fails or outlasts ``RUN_TIMEOUT_SECONDS``, ends the demo
    with ``SystemExit`` and the tail of its log."""
    sink = cfg.build_sink(check=False)  # the head's reader, kept: one preflight, not one a poll
    with Progress(f"{name} stream", total=input_records, unit="rows") as progress:
        for attempt in range(1, kills + 1):
            log_path = log_dir / f"{name}-run-{attempt}.log"
            _run_and_kill(sink, config, f"{name} run {attempt}", rng, log_path, progress)
            progress.write(f"{name}: kill {attempt}/{kills} at epoch {head_epoch(sink)}")
        last = log_dir / f"{name}-run-{kills + 1}.log"
        _run_until_done(config, f"{name} run {kills + 1}", last, progress)
    return kills


def _run_and_kill(
    sink: ExactlyOnceSink,
    config: str,
    label: str,
    rng: random.Random,
    log_path: Path,
    progress: Progress,
) -> None:
    proc = start_run(config, log_path, label, progress)
    # 1-3 epochs: after the first, a warm JVM's batches are short, so the 0-2 s delay
    # lands anywhere from before the write, through the commit, to after Spark's commit.
    after = head_epoch(sink) + rng.randint(0, 2)
    epoch = wait_for_new_epoch(sink, proc, after, RUN_TIMEOUT_SECONDS)
    if epoch is None:
        _fail_run(proc, log_path, "ended before committing an epoch")
    time.sleep(rng.uniform(0.0, 2.0))
    kill_group(proc)


def _run_until_done(config: str, label: str, log_path: Path, progress: Progress) -> None:
    proc = start_run(config, log_path, label, progress)
    try:
        code = proc.wait(timeout=RUN_TIMEOUT_SECONDS)
    except subprocess.TimeoutExpired:
        _fail_run(proc, log_path, "did not finish in time")
    _LIVE.discard(proc)
    if code != 0:
        _fail_run(proc, log_path, f"exited with {code}")


def _fail_run(proc: subprocess.Popen[str], log_path: Path, why: str) -> NoReturn:
    if proc.poll() is None:
        kill_group(proc)
    tail = log_path.read_text(encoding="utf-8", errors="replace").splitlines()[-15:]
    raise SystemExit(f"demo run {why}; last lines of {log_path}:\n" + "\n".join(tail))
