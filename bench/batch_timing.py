"""Batch durations of a ``foreachBatch`` sink, and their percentiles (the buffer benchmarks)."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql import DataFrame


def percentile(values: Sequence[float], q: float) -> float:
    """Linear interpolation between closest ranks (numpy's default)."""
    ordered = sorted(values)
    if len(ordered) == 1:
        return ordered[0]
    pos = (len(ordered) - 1) * q / 100
    low = int(pos)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (pos - low)


def timed_batches(
    sink: Callable[[DataFrame, int], None], batches: Sequence[DataFrame]
) -> list[float]:
    """Epoch 0 untimed (the sink's start: preflight, head, catalog), the rest timed."""
    sink(batches[0], 0)
    out = []
    for epoch, df in enumerate(batches[1:], start=1):
        began = time.perf_counter()
        sink(df, epoch)
        out.append(time.perf_counter() - began)
    return out


def summary(runs: list[float]) -> dict[str, Any]:
    return {
        "p50_s": round(statistics.median(runs), 4),
        "p99_s": round(percentile(runs, 99), 4),
        "runs_seconds": [round(s, 4) for s in runs],
    }
