"""A run's progress lines (runs of the demo and of ``exactlyonce chaos``, started by
:mod:`exactlyonce.integration.lab.runs`): echoed under the run's label (``pg run 2``), with
the dedup counters each batch reports summed over every run of the demo (both pipelines,
killed runs included) and printed at the end. Each batch's rows also move the pipeline's
progress bar (a plain line every few seconds when not on a terminal): rows read against the
input's."""

from __future__ import annotations

import re
import subprocess
import threading

from exactlyonce.progress import Progress

_DEDUP_LINE = re.compile(
    r"\| dedup: (\d+) checked, (\d+) bloom negatives, (\d+) catalog lookups, "
    r"(\d+) catalog duplicates, (\d+) false positives"
)
DEDUP_FIELDS = (
    "checked",
    "bloom negatives",
    "catalog lookups",
    "catalog duplicates",
    "false positives",
)
# Dedup counters summed over every batch of every run (killed runs included).
DEDUP_TOTALS = dict.fromkeys(DEDUP_FIELDS, 0)
_TOTALS_LOCK = threading.Lock()  # runs of both pipelines are echoed at once
_BATCH_ROWS = re.compile(r"epoch \d+: (\d+) rows,")


def echo(proc: subprocess.Popen[str], label: str, progress: Progress | None = None) -> None:
    """Print each line of ``proc``'s stdout (its dedup part cut off) until it ends, adding
    the dedup counters to :data:`DEDUP_TOTALS` and each batch's rows to ``progress``. Runs
    in a daemon thread per run."""
    assert proc.stdout is not None
    for line in proc.stdout:
        text, _, _ = line.rstrip().partition(" | dedup:")
        if progress is None:
            print(f"  [{label}] {text}", flush=True)
        else:
            progress.write(f"  [{label}] {text}")  # above the bar on a terminal
            rows = _BATCH_ROWS.search(text)
            if rows:
                progress.update(int(rows.group(1)))
        found = _DEDUP_LINE.search(line)
        if found:
            with _TOTALS_LOCK:
                for name, value in zip(DEDUP_FIELDS, found.groups(), strict=True):
                    DEDUP_TOTALS[name] += int(value)


def print_dedup_totals() -> None:
    """The dedup layer's counters over the whole demo, and the observed false-positive rate."""
    t = DEDUP_TOTALS
    new = t["bloom negatives"] + t["false positives"]
    print("DEDUP (Bloom filter + Redis catalog, all batches of all runs)")
    for name in DEDUP_FIELDS:
        print(f"  {'IDs ' + name if name == 'checked' else name:<22}{t[name]:>10}")
    rate = t["false positives"] / new if new else 0.0
    print(f"  {'observed fp rate':<22}{rate:>10.4%}")
