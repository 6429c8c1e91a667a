"""Runs of ``exactlyonce run``: start one in its own process group, wait until the sink's head
shows new epochs, SIGKILL the whole group, restart; the last run goes on until idle."""

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

import psycopg
from psycopg import sql

from exactlyonce.connectors.postgres.schema import HEADS, TableName, regclass
from exactlyonce.integration.config import PipelineConfig
from exactlyonce.integration.demo.echo import echo
from exactlyonce.integration.demo.pipeline import pg_sink
from exactlyonce.integration.services.processes import START_POLL, poll_until

IDLE_SECONDS = 15
RUN_TIMEOUT_SECONDS = 300


def head_epoch(cfg: PipelineConfig) -> int:
    """The query's committed head in PostgreSQL, -1 before the first commit."""
    table = TableName.parse(pg_sink(cfg).table)
    with psycopg.connect(pg_sink(cfg).dsn.get_secret_value(), autocommit=True) as conn:
        if regclass(conn, TableName(table.schema, HEADS)) is None:
            return -1
        row = conn.execute(
            sql.SQL("SELECT max(epoch) FROM {} WHERE query_name = %s").format(table.sibling(HEADS)),
            [cfg.query_name],
        ).fetchone()
    return -1 if row is None or row[0] is None else int(row[0])


def start_run(config: str, log_path: Path, label: str) -> subprocess.Popen[str]:
    """``exactlyonce run`` in a new session; its progress lines are echoed, stderr logged."""
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
    threading.Thread(target=echo, args=(proc, label), daemon=True).start()
    return proc


def wait_for_new_epoch(
    cfg: PipelineConfig, proc: subprocess.Popen[str], after: int, timeout: float
) -> int | None:
    """The head once it passes ``after``; None if the run ended or timed out first.

    A poll (every 0.2 s, up to ``timeout`` seconds), not a retry: an error reading the head
    propagates."""
    passed: list[int] = []

    def passed_or_ended() -> bool:
        if proc.poll() is not None:
            return True
        epoch = head_epoch(cfg)
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


def run_with_kills(
    cfg: PipelineConfig, config: str, kills: int, rng: random.Random, log_dir: Path
) -> int:
    """Run, SIGKILL after each new epoch ``kills`` times, then run until idle; kills done.

    A run that ends before committing, or a last run that fails or outlasts
    ``RUN_TIMEOUT_SECONDS``, ends the demo with ``SystemExit`` and the tail of its log."""
    for attempt in range(1, kills + 1):
        _run_and_kill(cfg, config, attempt, kills, rng, log_dir)
    _run_until_idle(config, kills + 1, log_dir)
    return kills


def _run_and_kill(
    cfg: PipelineConfig, config: str, attempt: int, kills: int, rng: random.Random, log_dir: Path
) -> None:
    log_path = log_dir / f"run-{attempt}.log"
    proc = start_run(config, log_path, f"run {attempt}")
    # 1-3 epochs: after the first, a warm JVM's batches are short, so the 0-2 s delay
    # lands anywhere from before the write, through the COPY, to after Spark's commit.
    after = head_epoch(cfg) + rng.randint(0, 2)
    epoch = wait_for_new_epoch(cfg, proc, after, RUN_TIMEOUT_SECONDS)
    if epoch is None:
        _fail_run(proc, log_path, "ended before committing an epoch")
    time.sleep(rng.uniform(0.0, 2.0))
    at = head_epoch(cfg)
    kill_group(proc)
    print(f"kill {attempt}/{kills} at epoch {at} (pid {proc.pid})", flush=True)


def _run_until_idle(config: str, number: int, log_dir: Path) -> None:
    log_path = log_dir / f"run-{number}.log"
    proc = start_run(config, log_path, f"run {number}")
    try:
        code = proc.wait(timeout=RUN_TIMEOUT_SECONDS)
    except subprocess.TimeoutExpired:
        _fail_run(proc, log_path, "did not finish in time")
    if code != 0:
        _fail_run(proc, log_path, f"exited with {code}")


def _fail_run(proc: subprocess.Popen[str], log_path: Path, why: str) -> NoReturn:
    if proc.poll() is None:
        kill_group(proc)
    tail = log_path.read_text(encoding="utf-8", errors="replace").splitlines()[-15:]
    raise SystemExit(f"demo run {why}; last lines of {log_path}:\n" + "\n".join(tail))
