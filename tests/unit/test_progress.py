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

from pytest import MonkeyPatch

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
    assert lines[0] == "copying: 100/300 rows (33%)", lines  # one update: no rate yet
    assert re.fullmatch(r"copying: 200/300 rows \(67%\), [\d,]+ rows/s, ETA \d+ s", lines[1]), lines
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
    assert out.getvalue().splitlines()[-1] == "rebuild: 7 IDs"
    single = Progress("audit", total=6, unit="rows", stream=out, every_s=0)
    single.update(6)
    single.close()  # all of it in one update: its last line has the average rate
    average = r"audit: 6/6 rows \(100%\), [\d,]+ rows/s; done in [\d.]+ s$"
    assert re.match(average, out.getvalue().splitlines()[-1])
    unknown.update(3)
    assert re.match(r"rebuild: 10 IDs, [\d,]+ IDs/s$", out.getvalue().splitlines()[-1])


def test_on_a_terminal_it_draws_a_bar() -> None:
    out = io.StringIO()
    with Progress("drain", total=100, unit="records", stream=out, bar=True) as progress:
        progress.update(50)
        progress.update(50)
        progress.write("a line above the bar", stream=out)
    drawn = out.getvalue()
    assert "\r" in drawn and "100/100" in drawn and "records/s" in drawn, drawn
    assert "a line above the bar" in drawn


class Clock:
    """time.monotonic() as the test sets it."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_the_wait_before_the_first_rows_is_not_throughput(monkeypatch: MonkeyPatch) -> None:
    """A stream's first batch comes ~20 s after the start (Spark's JVM starting): counted as
    throughput, 398 rows read '20 rows/s, ETA 347 s'. The rate clock starts at the first rows;
    until a second update there is no rate to show, and no ETA."""
    clock = Clock()
    monkeypatch.setattr("exactlyonce.progress.time.monotonic", clock)
    out = io.StringIO()
    progress = Progress("pg stream", total=7311, unit="rows", stream=out, every_s=0)
    clock.now += 20.0  # the JVM starts: nothing arrives
    progress.update(398)
    assert out.getvalue().splitlines()[-1] == "pg stream: 398/7,311 rows (5%)"
    clock.now += 2.0
    progress.update(398)  # 398 rows in the 2 s since the first ones: 199 rows/s
    last = out.getvalue().splitlines()[-1]
    assert last == "pg stream: 796/7,311 rows (11%), 199 rows/s, ETA 33 s"
    clock.now += 2.0
    progress.close()  # the whole time is still told
    assert out.getvalue().splitlines()[-1] == (
        "pg stream: 796/7,311 rows (11%), 100 rows/s; done in 24.0 s"
    )


def test_the_bar_shows_the_same_rate(monkeypatch: MonkeyPatch) -> None:
    clock = Clock()
    monkeypatch.setattr("exactlyonce.progress.time.monotonic", clock)
    out = io.StringIO()
    progress = Progress("pg stream", total=7311, unit="rows", stream=out, bar=True)
    clock.now += 20.0
    progress.update(398)
    assert "rows/s" not in (progress._bar.postfix or "")
    clock.now += 2.0
    progress.update(398)
    assert progress._bar.postfix == "199 rows/s, ETA 33 s"
    progress.close()  # ended: the rate, no ETA
    assert out.getvalue().split("\r")[-1].endswith("199 rows/s]\n"), out.getvalue()


def test_a_task_that_ends_short_of_its_total_shows_no_eta(monkeypatch: MonkeyPatch) -> None:
    """A demo stream can end below its total (the line of a batch a kill cut off is lost):
    its last line read '6,386/7,183 rows (89%), 47 rows/s, ETA 17 s; done in 135.2 s'. Done
    is done: the last line (plain, or the bar's) tells the rate, not an ETA."""
    clock = Clock()
    monkeypatch.setattr("exactlyonce.progress.time.monotonic", clock)
    out = io.StringIO()
    with Progress("kafka stream", total=7183, unit="rows", stream=out, every_s=60) as plain:
        for _ in range(3):
            clock.now += 2.0
            plain.update(400)
    assert out.getvalue().splitlines()[-1] == (
        "kafka stream: 1,200/7,183 rows (17%), 200 rows/s; done in 6.0 s"
    )
    drawn = io.StringIO()
    with Progress("kafka stream", total=7183, unit="rows", stream=drawn, bar=True) as bar:
        for _ in range(3):
            clock.now += 2.0
            bar.update(400)
    last = drawn.getvalue().split("\r")[-1]
    assert "200 rows/s]" in last and "ETA" not in last, last
