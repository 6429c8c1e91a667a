"""The one line per batch: what it says, that a ``foreachBatch(sink)`` user who configured no
logging sees it on stderr, that ``exactlyonce.quiet()`` and a user's own logging take over,
and that the CLI does not show it twice. Each case runs in a fresh interpreter (pytest itself
configures logging), on the in-process sink protocol; the same line from a real PostgreSQL
stream: tests/integration/test_metrics.py."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from exactlyonce.connectors.base import BatchReport, batch_line

ROOT = Path(__file__).resolve().parents[2]

BATCHES = """
from exactlyonce.testing import MemorySink, MemoryStore, run_in_process
sink = MemorySink(MemoryStore(), "events", ["k"], "q", shards=2, dedup=False)
run_in_process(sink, 0, [{"k": "a"}, {"k": "b"}, {"k": "a"}])
run_in_process(sink, 0, [{"k": "a"}])
"""


def stderr_of(prelude: str) -> str:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-c", prelude + BATCHES],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=True,
    )
    return done.stderr


def test_the_line_says_what_the_batch_did() -> None:
    report = BatchReport("q", "s", 7, skipped=False, rows=1000, written=990, duplicates=10,
                         seconds=1.25)  # fmt: skip
    assert batch_line(report) == (
        "epoch 7: 1000 rows, 990 written, 10 duplicates, 0 dead letters, 1.25 s, 800 rows/s"
    )
    report.stale, report.deleted = 3, 1
    assert ", 0 dead letters, 3 stale, 1 deleted, 1.25 s" in batch_line(report)
    assert "already committed" in batch_line(BatchReport("q", "s", 7, skipped=True))


def test_foreach_batch_users_see_one_line_per_batch_by_default() -> None:
    err = stderr_of("")
    lines = [line for line in err.splitlines() if "exactlyonce.batches" in line]
    assert len(lines) == 2, err
    assert "epoch 0: 3 rows, 2 written, 1 duplicates, 0 dead letters" in lines[0], err
    assert "rows/s" in lines[0] and "already committed" in lines[1], err


@pytest.mark.parametrize(
    "prelude",
    [
        "import exactlyonce; exactlyonce.quiet()\n",
        # The user's own logging (root at WARNING): theirs decides, nothing is added.
        "import logging; logging.basicConfig()\n",
    ],
)
def test_quiet_or_the_users_own_logging_show_no_batch_line(prelude: str) -> None:
    err = stderr_of(prelude)
    assert "epoch 0" not in err, err


def test_the_cli_logging_leaves_the_batch_line_to_run_s_stdout() -> None:
    err = stderr_of(
        "from exactlyonce.integration.cli import _configure_logging; _configure_logging()\n"
    )
    assert "epoch 0" not in err, err
    assert "started: head epoch" in err, "the rest of the package's log still shows"
