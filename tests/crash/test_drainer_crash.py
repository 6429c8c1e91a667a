"""kill -9 the drainer (``exactlyonce drain pipeline.yaml``, a real subprocess) inside its write
transactions, restart it, and count the writes.

Real Spark fills the buffer first (the pipeline's own ``Buffered`` sink, epoch by epoch, with
duplicates and null keys). The drainer then runs with small transactions and is SIGKILLed at
named points (``drain_before_write``, ``drain_mid_write`` with rows inserted and the
transaction open, ``drain_after_commit``) at seeded-random transaction numbers, and once at a
seeded-random moment. tests/support/audit.py's two triggers count writes: the AFTER INSERT log
(durable rows) and the BEFORE INSERT attempts log, which also sees records that ``ON CONFLICT DO
NOTHING`` would hide:
a drainer that re-wrote committed records (offsets not stored atomically with the rows) fails
the test even though the unique index keeps the table clean.
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psycopg
import pytest
from pyspark.sql import SparkSession

from exactlyonce.connectors.kafka.buffer import Buffered
from exactlyonce.connectors.kafka.reader import load_commits
from exactlyonce.integration.config import load_config
from tests.crash.harness import ROOT, crash_seed, make_input, session_members
from tests.integration.test_buffer import stored_offsets
from tests.support.audit import assert_exactly_once, install_audit, write_counts
from tests.support.kafka_audit import read_topic
from tests.support.pipelines import buffered_pipeline

pytestmark = [pytest.mark.crash, pytest.mark.integration]

SCHEMA = "event_id STRING, amount BIGINT, action STRING"
# Frames of several records (a kill mid-frame must not split one), yet enough messages for
# every scheduled kill: ~1,300 records make ~220 frames, ~60 records per transaction.
FRAME_RECORDS = 6


class DrainProcess:
    def __init__(self, workdir: Path, config: Path) -> None:
        self.workdir = workdir
        self.config = config
        self.runs = 0
        self.kills: list[str] = []
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, crash_at: str | None = None) -> Path:
        self.runs += 1
        crash_dir = self.workdir / f"crash-{self.runs}"
        crash_dir.mkdir()
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        env.pop("EXACTLYONCE_CRASH_AT", None)
        if crash_at:
            env["EXACTLYONCE_CRASH_AT"] = crash_at
            env["EXACTLYONCE_CRASH_DIR"] = str(crash_dir)
        log = open(self.workdir / f"drain-{self.runs}.log", "wb")  # noqa: SIM115
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "exactlyonce", "drain", str(self.config), "--until-idle", "2"],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )
        return crash_dir

    def kill(self, why: str) -> None:
        assert self.proc is not None
        os.killpg(self.proc.pid, signal.SIGKILL)
        for pid in session_members(self.proc.pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        self.proc.wait(timeout=30)
        self.kills.append(why)
        print(f"killed drain run {self.runs} ({why})", flush=True)

    def wait_for_marker(self, crash_dir: Path, point: str, timeout: float = 60) -> None:
        marker = crash_dir / f"crashed-{point}"
        deadline = time.monotonic() + timeout
        while not marker.exists():
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise AssertionError(f"drainer exited before {point}:\n{self.log_tail()}")
            assert time.monotonic() < deadline, f"no {point} in {timeout}s:\n{self.log_tail()}"
            time.sleep(0.05)
        time.sleep(0.2)  # inside its wait loop, transaction open where the point is mid-write

    def finish(self, timeout: float = 90) -> None:
        assert self.proc is not None
        try:
            code = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill("timeout")
            raise AssertionError(f"drainer did not finish:\n{self.log_tail()}") from None
        assert code == 0, f"drainer exited {code}:\n{self.log_tail()}"

    def log_tail(self, lines: int = 30) -> str:
        text = (self.workdir / f"drain-{self.runs}.log").read_text(errors="replace")
        return "\n".join(text.splitlines()[-lines:])


def test_drainer_killed_mid_write_resumes_exactly_once(
    spark: SparkSession,
    services: dict[str, str],
    pg: psycopg.Connection[Any],
    tmp_path: Path,
    unique_name: str,
) -> None:
    seed = crash_seed("drainer kill schedule")
    rng = random.Random(seed)

    # Spark fills the buffer through the pipeline's own sink: 6 epochs, duplicates, null keys.
    data = make_input(tmp_path / "input", files=6, rows=300, seed=seed)
    config = tmp_path / "pipeline.yaml"
    config.write_text(
        buffered_pipeline(
            unique_name,
            tmp_path,
            schema=SCHEMA,
            partitions=2,
            shards=2,
            batch_size=60,
            frame_records=FRAME_RECORDS,
        )
    )
    buffered = load_config(config).build_sink()
    assert isinstance(buffered, Buffered)
    files = sorted((tmp_path / "input").glob("part-*.json"))
    buffered.preflight(spark.read.schema(SCHEMA).json(str(files[0])).schema)
    install_audit(pg, unique_name)
    for epoch, path in enumerate(files):
        buffered(spark.read.schema(SCHEMA).json(str(path)), epoch)
    assert sum(r.written for r in buffered.reports) == len(data.expected_ids)
    assert len(data.expected_ids) > 16 * 60, "too few records for every scheduled kill"
    layout = [
        len(dict(m.headers or []).get("eo-record-ids", b"")) // 32
        for m in read_topic(services["KAFKA_BOOTSTRAP_SERVERS"], unique_name, "read_uncommitted")
    ]
    assert max(layout) == FRAME_RECORDS and len(layout) > 16 * 2, "frames, and enough of them"

    # Kill it at every named point, mid-write three times, at seeded transaction numbers.
    # At most 16 transactions commit before the kills (3 + 3 + 3 + 3 + 4), 960 records at
    # batch_size 60: fewer than the ~1,300 the buffer holds, so every kill comes (with 120 a
    # seed drawing high numbers ran out of records: "drainer exited before drain_mid_write").
    schedule = ["drain_mid_write"] * 3 + ["drain_before_write", "drain_after_commit"]
    rng.shuffle(schedule)
    drainer = DrainProcess(tmp_path, config)
    progress = []
    for point in schedule:
        at = rng.randint(1, 4)
        crash_dir = drainer.start(crash_at=f"{point}@{at}")
        drainer.wait_for_marker(crash_dir, point)
        if point == "drain_mid_write":
            assert drainer.proc is not None
            open_tx = pg.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s "
                "AND state = 'idle in transaction'",
                [f"exactlyonce:drainer:{drainer.proc.pid}"],
            ).fetchone()
            assert open_tx is not None and open_tx[0] >= 1, "not inside an open transaction"
        drainer.kill(f"{point}@{at}")
        progress.append(sum(stored_offsets(pg, unique_name).values()))
    # And once at a random moment (it idles 2 s before it exits: it is still running).
    drainer.start()
    time.sleep(rng.uniform(0.5, 2.5))
    assert drainer.proc is not None and drainer.proc.poll() is None, (
        f"the drainer ended before its random kill (seed {seed})"
    )
    drainer.kill(f"random moment (seed {seed})")
    drainer.start()
    drainer.finish()
    print(drainer.log_tail(3))
    assert len(drainer.kills) == len(schedule) + 1, f"kills: {drainer.kills} (seed {seed})"
    assert progress[-1] > 0, "no kill came after any committed transaction"

    assert_exactly_once(pg, unique_name, data.expected_ids)
    repeated = {i: n for i, n in write_counts(pg, unique_name).items() if n > 1}
    assert not repeated, f"{len(repeated)} records written again after a restart (seed {seed})"
    commits = load_commits(services["KAFKA_BOOTSTRAP_SERVERS"], unique_name, topic=unique_name)
    assert stored_offsets(pg, unique_name) == commits.frontier(unique_name), (
        "the stored offsets end at the buffer's committed frontier"
    )
    letters = read_topic(
        services["KAFKA_BOOTSTRAP_SERVERS"], f"{unique_name}.drain-dead-letters", "read_uncommitted"
    )
    assert letters == [], "no message of this buffer is bad"
