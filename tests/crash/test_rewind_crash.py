"""kill -9 ``exactlyonce rewind`` between its steps; run it again; re-run the stream; audit.

The rewind (``exactlyonce.integration.cli.rewind``) drops the catalog, has the sink remove
its records above N and move its head back, then moves the Spark checkpoint back. Each test
runs a small file-source query (tests/integration/test_rewind.py's three epochs), then, for
each named point, runs the rewind as a real process, SIGKILLs it there (every kill asserted,
and the half-done state it leaves checked), finishes the rewind by running it again, re-runs
the stream from the checkpoint, and counts WRITES: the PostgreSQL table is in ``mode:
append`` (no unique index: a record written twice is two rows) with an audit trigger, the
Redis stream is append-only (an entry is a write).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import psycopg
import pytest

from exactlyonce.integration import cli
from tests.crash.harness import ROOT
from tests.integration.test_rewind import (
    ALL,
    EPOCHS,
    FIRST,
    REWOUND,
    checkpoint_batches,
    postgres_pipeline,
    run_query,
    stream_entries,
    write_pipeline,
)
from tests.support.audit import sink_ids, write_counts

pytestmark = [pytest.mark.crash, pytest.mark.integration]
LAST = len(EPOCHS) - 1


def kill_rewind_at(config: Path, point: str, to: int, crash_dir: Path) -> None:
    """Run the rewind as a process, wait for it to reach ``point`` and SIGKILL it there."""
    crash_dir.mkdir()
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "EXACTLYONCE_CRASH_AT": f"{point}@{to}",
        "EXACTLYONCE_CRASH_DIR": str(crash_dir),
    }
    command = [sys.executable, "-m", "exactlyonce", "rewind", str(config), "--to-epoch", str(to)]
    proc = subprocess.Popen([*command, "--yes"], env=env, stdout=subprocess.DEVNULL)
    marker, deadline = crash_dir / f"crashed-{point}", time.monotonic() + 60
    while not marker.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert marker.exists(), f"the rewind never reached {point} (exit {proc.poll()})"
    os.kill(proc.pid, signal.SIGKILL)
    assert proc.wait(timeout=30) == -signal.SIGKILL, f"the kill at {point} did not happen"


def head_epoch(config: Path, capsys: pytest.CaptureFixture[str]) -> int | None:
    from tests.integration.test_rewind import heads_json

    head = heads_json(config, capsys)["head"]
    return None if head is None else int(head["epoch"])


def finish_and_rerun(spark: Any, config: Path, to: int) -> None:
    """The procedure after a rewind cut short: run it again, then the stream."""
    assert cli.main(["rewind", str(config), "--to-epoch", str(to), "--yes"]) == 0
    run_query(spark, config)


def check_cut_short(
    point: str, to: int, config: Path, capsys: pytest.CaptureFixture[str], before: Any, was: int
) -> None:
    """What each point leaves behind: the head (``was`` before), and the checkpoint's batches
    above ``to`` (``before``)."""
    head = head_epoch(config, capsys)
    root = Path(config.parent / "checkpoint")
    if point in ("rewind_after_catalog", "rewind_mid_delete"):
        assert head == was and checkpoint_batches(config) == before
    elif point == "rewind_after_sink" and to < 0:
        assert head == to and root.exists(), "the checkpoint should still be there"
    elif point == "rewind_after_sink":
        assert head == to and checkpoint_batches(config) == before
    else:  # mid-checkpoint: some batch files above ``to`` gone, not all
        after = checkpoint_batches(config)
        assert head == to and after != before and any(after.values())


# (point, epoch to rewind to): each one cut short, finished, then the stream re-run.
PG_POINTS = [
    ("rewind_after_catalog", 0),
    ("rewind_after_sink", 0),
    ("rewind_mid_checkpoint", 0),
    ("rewind_after_sink", -1),
]


def test_postgres_rewind_killed_between_its_steps_then_finished_ends_exactly_once(
    tmp_path: Path,
    spark: Any,
    pg: psycopg.Connection[Any],
    unique_name: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    config = postgres_pipeline(tmp_path / "job", pg, unique_name, unique=False)
    run_query(spark, config)
    writes = Counter(dict.fromkeys(ALL, 1))
    for n, (point, to) in enumerate(PG_POINTS):
        before, was = checkpoint_batches(config), head_epoch(config, capsys)
        assert was is not None and was > to
        kill_rewind_at(config, point, to, tmp_path / f"crash-{n}")
        check_cut_short(point, to, config, capsys, before, was)
        finish_and_rerun(spark, config, to)
        writes.update(REWOUND if to == 0 else ALL)  # removed above ``to``, written again
        # The re-run may group the old batches into fewer (epoch 1 reading two files).
        assert (head_epoch(config, capsys) or -1) > max(to, 0)

        ids = sink_ids(pg, unique_name)
        assert len(ids) == len(set(ids)) and set(ids) == ALL, f"after {point}@{to}"
        assert write_counts(pg, unique_name) == dict(writes), f"after {point}@{to}"
    assert set(writes[i] for i in FIRST) == {2} and set(writes[i] for i in REWOUND) == {5}


def test_redis_stream_rewind_killed_mid_delete_then_finished_ends_exactly_once(
    tmp_path: Path, spark: Any, services: dict[str, str], unique_name: str, capsys: Any
) -> None:
    import redis

    key = f"{unique_name}:events"
    sink = (
        "  type: redis\n  url: ${EXACTLYONCE_REDIS_URL}\n"
        f"  key_template: '{key}'\n  write: stream\n  id_columns: [event_id]\n  shards: 2\n"
    )
    config = write_pipeline(tmp_path / "job", unique_name, sink)
    client = redis.Redis.from_url(services["EXACTLYONCE_REDIS_URL"])
    run_query(spark, config)
    full = stream_entries(client, key)

    kill_rewind_at(config, "rewind_mid_delete", 0, tmp_path / "crash")
    check_cut_short("rewind_mid_delete", 0, config, capsys, checkpoint_batches(config), LAST)
    kept = stream_entries(client, key)
    assert len(kept) < len(full) and {e for _, e in kept} == {0}, "deleted, head not moved"
    finish_and_rerun(spark, config, 0)

    counts = Counter(rid for rid, _ in stream_entries(client, key))
    assert set(counts) == ALL and set(counts.values()) == {1}, "duplicates or missing entries"
    assert (head_epoch(config, capsys) or -1) > 0
