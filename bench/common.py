"""Shared helpers for the benchmarks: progress lines, timing, machine facts, results files.

Every benchmark writes one JSON file, ``bench/results/<name>.json``, holding the machine it
ran on, the library versions, the date, the row count and every figure it measured, and
prints a table of rows/s with ratios against the path being judged. Rates from one run are
noisy on a shared machine; compare ratios measured in the same run, not absolute numbers
across runs.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import platform
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

RESULTS_DIR = Path(__file__).resolve().parent / "results"
T = TypeVar("T")

_STARTED = time.monotonic()


def progress(message: str) -> None:
    """One progress line to stderr, stamped with the seconds since the benchmark began."""
    print(f"[{time.monotonic() - _STARTED:7.1f}s] {message}", file=sys.stderr, flush=True)


def timed(fn: Callable[[], T]) -> tuple[float, T]:
    """Run ``fn`` once; return (wall seconds, its result)."""
    began = time.perf_counter()
    result = fn()
    return time.perf_counter() - began, result


@dataclass
class PathTiming:
    """The timed runs of one write path over the same rows."""

    name: str
    rows: int
    runs: list[float] = field(default_factory=list)
    details: list[dict[str, Any]] = field(default_factory=list)
    discarded: list[dict[str, Any]] = field(default_factory=list)

    @property
    def best(self) -> float:
        if not self.runs:
            raise ValueError(f"{self.name}: no timed run")
        return min(self.runs)

    @property
    def rows_per_s(self) -> float:
        return self.rows / self.best

    def as_dict(self) -> dict[str, Any]:
        return {
            "rows": self.rows,
            "best_seconds": round(self.best, 4),
            "rows_per_s": round(self.rows_per_s),
            "runs_seconds": [round(s, 4) for s in self.runs],
            "details": self.details,
            **({"discarded_runs": self.discarded} if self.discarded else {}),
        }


def ratio(numerator: float, denominator: float) -> float:
    return round(numerator / denominator, 3) if denominator else float("nan")


def print_table(paths: Sequence[PathTiming], judged: str, title: str = "") -> str:
    """Print (and return) rows/s per path and each path's ratio against ``judged``.

    The last column is ``judged / path``: above 1.0 the judged path is faster.
    """
    by_name = {p.name: p for p in paths}
    ref = by_name[judged].rows_per_s
    header = f"{'path':<24} {'rows':>10} {'best s':>9} {'rows/s':>12} {'vs ' + judged:>14}"
    lines = [title] if title else []
    lines += [
        f"(last column: {judged} rows/s / the path's rows/s; above 1.0 {judged} is faster)",
        header,
        "-" * len(header),
    ]
    for p in paths:
        vs = "1.000x" if p.name == judged else f"{ratio(ref, p.rows_per_s):.3f}x"
        lines.append(
            f"{p.name:<24} {p.rows:>10,} {p.best:>9.3f} {p.rows_per_s:>12,.0f} {vs:>14}"
        )
    text = "\n".join(lines)
    print(text, flush=True)
    return text


def _cpu_model() -> str | None:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or None


def _memory_gib() -> float | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return round(int(line.split()[1]) / (1024 * 1024), 1)
    except (OSError, ValueError, IndexError):
        pass
    return None


def _os_release() -> str | None:
    try:
        for line in Path("/etc/os-release").read_text().splitlines():
            if line.startswith("PRETTY_NAME="):
                return line.split("=", 1)[1].strip('"')
    except OSError:
        pass
    return None


def machine_info() -> dict[str, Any]:
    return {
        "hostname": platform.node(),
        "os": _os_release() or platform.platform(),
        "kernel": platform.release(),
        "arch": platform.machine(),
        "cpu": _cpu_model(),
        "cores": os.cpu_count(),
        "memory_gib": _memory_gib(),
    }


def versions(*modules: str) -> dict[str, str | None]:
    """Python's version and each named module's ``__version__`` (None when not importable)."""
    out: dict[str, str | None] = {"python": platform.python_version()}
    for name in modules:
        try:
            module = __import__(name)
        except ImportError:
            out[name] = None
            continue
        out[name] = str(getattr(module, "__version__", None))
    return out


def now_utc() -> str:
    return dt.datetime.now(dt.timezone.utc).replace(microsecond=0).isoformat()


def write_results(name: str, data: dict[str, Any], directory: Path | None = None) -> Path:
    """Write ``<directory or bench/results>/<name>.json`` atomically; return its path."""
    directory = directory or RESULTS_DIR
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{name}.json"
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=False, default=str) + "\n")
    os.replace(tmp, path)
    return path
