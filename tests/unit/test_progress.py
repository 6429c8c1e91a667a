"""Progress of long tasks (:mod:`exactlyonce.progress`): plain lines with rate and ETA when
the output is not a terminal (a subprocess's captured stderr), a tqdm bar when it is. The drain
command's plain lines: tests/integration/test_drain_targets.py (the CLI tests)."""

from __future__ import annotations

import io
import os
import re
import subprocess
import sys
from pathlib import Path

from exactlyonce.progress import Progress

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = """
import time
from exactlyonce.progress import Progress
with Progress("copying", total=300, unit="rows", every_s=0.05) as progress:
    for _ in range(3):
        time.sleep(0.1)
        progress.update(100)
"""


def test_not_on_a_terminal_it_prints_plain_lines_with_rate_and_eta() -> None:
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT],
        capture_output=True, text=True, timeout=60, check=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    lines = done.stderr.splitlines()
    assert re.fullmatch(r"copying: 100/300 rows \(33%\), [\d,]+ rows/s, ETA \d+ s", lines[0]), lines
    assert re.fullmatch(
        r"copying: 300/300 rows \(100%\), [\d,]+ rows/s; done in [\d.]+ s", lines[-1]
    )
    assert "\r" not in done.stderr and done.stdout == ""


def test_a_growing_total_and_an_unknown_one() -> None:
    out = io.StringIO()
    progress = Progress("drain", unit="records", stream=out, every_s=0)
    progress.update(10, total=50)
    progress.update(40, total=40 + 50)  # more came in meanwhile
    assert re.match(r"drain: 50/90 records \(56%\), .* ETA \d+ s$", out.getvalue().splitlines()[-1])
    unknown = Progress("rebuild", unit="IDs", stream=out, every_s=0)
    unknown.update(7)
    assert re.match(r"rebuild: 7 IDs, [\d,]+ IDs/s$", out.getvalue().splitlines()[-1])


def test_on_a_terminal_it_draws_a_bar() -> None:
    out = io.StringIO()
    with Progress("drain", total=100, unit="records", stream=out, bar=True) as progress:
        progress.update(100)
        progress.write("a line above the bar", stream=out)
    drawn = out.getvalue()
    assert "\r" in drawn and "100/100" in drawn and "records/s" in drawn, drawn
    assert "a line above the bar" in drawn
