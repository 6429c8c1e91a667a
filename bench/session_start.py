"""How long a Spark session takes to start, with and without the class-data archive.

``python -m bench session_start [--trials 5]``: each trial starts a fresh Python process that
builds a session with :func:`exactlyonce.integration.spark.session` and runs one tiny job,
alternately with the archive (``make jars`` writes it:
:mod:`exactlyonce.integration.jvm_archive`) and without it (``EXACTLYONCE_JVM_ARCHIVE=off``),
so both see the same machine load. Reports the median seconds to a ready session and to the
first job's result, and the ratios; writes ``bench/results/session_start.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from collections.abc import Sequence
from typing import Any

from bench.common import (
    add_results_dir_argument,
    load_average,
    machine_with_load,
    now_utc,
    progress,
    ratio,
    write_results,
)

TRIAL = """
import json, time
began = time.perf_counter()
from exactlyonce.integration.spark import session
spark = session("session-start-bench", master="local[2]", connectors=False)
ready = time.perf_counter() - began
spark.range(1000).selectExpr("id % 7 AS k").groupBy("k").count().collect()
print("TRIAL " + json.dumps({"ready_s": ready, "first_job_s": time.perf_counter() - began}))
"""


def trial(archive: bool) -> dict[str, float]:
    env = {**os.environ, "EXACTLYONCE_JVM_ARCHIVE": "on" if archive else "off"}
    out = subprocess.run(
        [sys.executable, "-c", TRIAL], env=env, capture_output=True, text=True, timeout=600
    )
    lines = [line for line in out.stdout.splitlines() if line.startswith("TRIAL ")]
    if out.returncode != 0 or not lines:
        raise RuntimeError(f"trial failed ({out.returncode}): {out.stderr[-1500:]}")
    return {k: float(v) for k, v in json.loads(lines[-1].removeprefix("TRIAL ")).items()}


def medians(trials: list[dict[str, float]]) -> dict[str, float]:
    return {k: round(statistics.median(t[k] for t in trials), 2) for k in trials[0]}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.session_start", description=__doc__)
    parser.add_argument("--trials", type=int, default=5, help="trials of each kind")
    add_results_dir_argument(parser)
    args = parser.parse_args(argv)
    from exactlyonce.integration.jvm_archive import build

    build()  # make jars wrote it already; else written now
    load_start = load_average()
    runs: dict[bool, list[dict[str, float]]] = {True: [], False: []}
    for n in range(args.trials):
        for archive in (False, True):
            runs[archive].append(trial(archive))
            progress(f"trial {n + 1}, archive {'on' if archive else 'off'}: {runs[archive][-1]}")
    with_archive, without = medians(runs[True]), medians(runs[False])
    data: dict[str, Any] = {
        "date": now_utc(),
        "machine": machine_with_load(load_start),
        "settings": {"trials": args.trials, "master": "local[2]"},
        "with_archive": with_archive,
        "without_archive": without,
        "ready_time_ratio": ratio(with_archive["ready_s"], without["ready_s"]),
        "first_job_time_ratio": ratio(with_archive["first_job_s"], without["first_job_s"]),
    }
    path = write_results("session_start", data, args.results_dir)
    print(
        f"session ready: {with_archive['ready_s']} s with the archive, {without['ready_s']} s "
        f"without ({data['ready_time_ratio']}x the time); first job "
        f"{with_archive['first_job_s']} s vs {without['first_job_s']} s "
        f"({data['first_job_time_ratio']}x). Wrote {path}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
