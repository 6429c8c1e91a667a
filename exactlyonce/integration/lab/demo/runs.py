"""The demo's runs of ``exactlyonce run``: each SIGKILLed (whole process group) once the
sink's head shows new epochs, and restarted; the last run goes on until its query ends
(``available_now``: all input read) or is idle. Starting, watching and killing a run is
:mod:`exactlyonce.integration.lab.runs`, shared with ``exactlyonce chaos``."""

from __future__ import annotations

import random
import subprocess
import time
from pathlib import Path
from typing import NoReturn

from exactlyonce.connectors.base import ExactlyOnceSink
from exactlyonce.integration.config import PipelineConfig
from exactlyonce.integration.lab.runs import (
    IDLE_SECONDS,
    RUN_TIMEOUT_SECONDS,
    head_epoch,
    kill_all,
    kill_group,
    log_tail,
    reap,
    start_run,
    wait_for_new_epoch,
)
from exactlyonce.progress import Progress

__all__ = [
    "IDLE_SECONDS",
    "RUN_TIMEOUT_SECONDS",
    "head_epoch",
    "kill_all",
    "kill_group",
    "run_with_kills",
    "start_run",
    "wait_for_new_epoch",
]


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
        code = reap(proc, RUN_TIMEOUT_SECONDS)
    except subprocess.TimeoutExpired:
        _fail_run(proc, log_path, "did not finish in time")
    if code != 0:
        _fail_run(proc, log_path, f"exited with {code}")


def _fail_run(proc: subprocess.Popen[str], log_path: Path, why: str) -> NoReturn:
    if proc.poll() is None:
        kill_group(proc)
    raise SystemExit(f"demo run {why}; last lines of {log_path}:\n{log_tail(log_path)}")
