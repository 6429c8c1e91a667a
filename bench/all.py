"""``python -m bench all``: every benchmark, one after another, then one table of the targets.

What ``make bench`` runs. Each benchmark runs in its own process (``python -m bench NAME
...``, a fresh Spark driver each) and writes its results file under bench/results/; a line
before and after each says which one runs, how far along the whole run is, and how long it
took. A benchmark that fails is reported and the others still run. At the end:
``python -m bench summary`` draws summary.png and ``python -m bench table`` prints every
figure against its target. The sizes below are chosen for about 25 minutes on an otherwise
idle 2-core machine (estimated; ``--quick`` took 33 minutes on a shared VM at load 13-14,
almost all of it Spark and Python start-up); ``--quick`` runs the same benchmarks at small
sizes (to see that they work, not for figures; it overwrites the results files), ``--only``
a subset.

Exit status: 0 when every benchmark ran (targets met or not: the table says which), 1 when
any failed.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass

from bench.common import RESULTS_DIR


@dataclass(frozen=True)
class Step:
    """One benchmark: its name for ``python -m bench``, the arguments of the full run and of
    ``--quick``."""

    name: str
    full: tuple[str, ...]
    quick: tuple[str, ...]


STEPS = (
    Step(
        "postgres",
        ("--rows", "1000000", "--repeat", "3"),
        ("--rows", "50000", "--repeat", "1", "--warmup-rows", "5000"),
    ),
    Step("dedup", ("--ids", "1000000", "--rows", "1000000"), ("--ids", "50000", "--rows", "50000")),
    # The buffer in front of PostgreSQL is measured with the others by `buffer` below.
    Step(
        "kafka",
        ("--rows", "300000", "--repeat", "3", "--no-buffer"),
        ("--rows", "20000", "--repeat", "1", "--no-buffer"),
    ),
    Step(
        "buffer",
        # p99 of 7 timed batches (2 on the slow unbuffered path); drains of 100,000 rows, best of 2
        (
            "--batches",
            "8",
            "--slow-batches",
            "3",
            "--drain-rows",
            "100000",
            "--drain-repeat",
            "2",
            "--es-drain-rows",
            "50000",
        ),
        (
            "--batch-rows",
            "2000",
            "--batches",
            "3",
            "--slow-batches",
            "2",
            "--drain-rows",
            "20000",
            "--drain-repeat",
            "1",
            "--es-batch-rows",
            "1000",
            "--es-drain-rows",
            "10000",
        ),
    ),
    Step(
        "elasticsearch",
        ("--rows", "200000", "--repeat", "3"),
        ("--rows", "20000", "--repeat", "1", "--warmup-rows", "5000"),
    ),
    Step(
        "opensearch",
        ("--rows", "200000", "--repeat", "3"),
        ("--rows", "20000", "--repeat", "1", "--warmup-rows", "5000"),
    ),
    Step(
        "redis",
        ("--rows", "300000", "--repeat", "3"),
        ("--rows", "20000", "--repeat", "1", "--warmup-rows", "5000"),
    ),
    Step(
        "recovery",
        # A median of 5 restarts per path: single restarts vary by seconds on 2 shared cores
        # (the 2026-12-01 run's two at 1M IDs: 2.9 and 3.5 s).
        ("--sizes", "1000000,10000000", "--repeat", "5"),
        ("--sizes", "0,100000", "--repeat", "1"),
    ),
    Step("cluster_catalog", (), ("--ids", "100000", "--big-ids", "500000")),
    Step("session_start", ("--trials", "3"), ("--trials", "1")),
)


def duration(seconds: float) -> str:
    minutes, secs = divmod(int(round(seconds)), 60)
    return f"{minutes}m{secs:02d}s"


def banner(message: str, began: float) -> None:
    # On a line of its own: Spark's console progress bars end in a carriage return.
    print(f"\n==> [{duration(time.monotonic() - began)}] {message}", flush=True)


def run_step(step: Step, quick: bool) -> int:
    argv = [sys.executable, "-m", "bench", step.name, *(step.quick if quick else step.full)]
    return subprocess.call(argv)


def run_all(steps: Sequence[Step], quick: bool) -> dict[str, float | None]:
    """Run ``steps`` in order; each one's seconds, None for one that failed."""
    began = time.monotonic()
    took: dict[str, float | None] = {}
    for n, step in enumerate(steps, 1):
        banner(f"benchmark {n}/{len(steps)}: {step.name} starts", began)
        started = time.monotonic()
        code = run_step(step, quick)
        seconds = time.monotonic() - started
        took[step.name] = seconds if code == 0 else None
        outcome = "done" if code == 0 else f"FAILED (exit {code})"
        banner(f"benchmark {n}/{len(steps)}: {step.name} {outcome} in {duration(seconds)}", began)
    return took


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench all", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="small sizes: a smoke run")
    parser.add_argument("--only", help="comma-separated benchmarks (default: all)")
    args = parser.parse_args(argv)
    steps = list(STEPS)
    if args.only:
        wanted = {name.strip() for name in args.only.split(",") if name.strip()}
        unknown = wanted - {s.name for s in STEPS}
        if unknown:
            parser.error(f"unknown benchmark(s): {', '.join(sorted(unknown))}")
        steps = [s for s in STEPS if s.name in wanted]
    began = time.monotonic()
    took = run_all(steps, args.quick)
    subprocess.call([sys.executable, "-m", "bench", "summary"])
    failed = [name for name, seconds in took.items() if seconds is None]
    print(f"\nEvery benchmark's figures against their targets ({RESULTS_DIR}):\n", flush=True)
    subprocess.call([sys.executable, "-m", "bench", "table"])
    print(
        f"\n{len(took) - len(failed)} of {len(took)} benchmarks ran in "
        f"{duration(time.monotonic() - began)}"
        + (f"; FAILED: {', '.join(failed)}" if failed else ""),
        flush=True,
    )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
