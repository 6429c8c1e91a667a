"""The benchmarks' ceilings and CPU figures, as pure logic (and /proc on this machine)."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from bench.ceiling import (
    Ceilings,
    CpuMeter,
    _tree,
    _trees,
    ceiling_figures,
    cpu_per_million,
    path_figures,
    per_million_figures,
    sink_ceilings,
    write_stage_profile,
)
from bench.common import PathTiming


def _path(name: str, rows: int, seconds: list[float], totals: list[float]) -> PathTiming:
    p = PathTiming(name, rows)
    for s, total in zip(seconds, totals, strict=True):
        p.record(s, {"cpu": {"spark": total - 1, "broker": 1.0, "total": total, "wall": s}})
    return p


def test_cpu_per_million_takes_the_median_run_per_tree() -> None:
    p = _path("eos", 500_000, [1.0, 2.0, 3.0], [9.0, 5.0, 7.0])
    assert cpu_per_million({"eos": p}) == {"eos": {"spark": 12.0, "broker": 2.0, "total": 14.0}}


def test_stage_figures_take_the_best_rate_and_the_median_cpu_per_tree() -> None:
    runs = {
        "eos": [
            (2.0, {"spark": 3.0, "postgres": 1.0, "total": 4.0, "wall": 2.0}),
            (1.0, {"spark": 5.0, "postgres": 3.0, "total": 8.0, "wall": 1.0}),
            (4.0, {"spark": 1.0, "postgres": 2.0, "total": 3.0, "wall": 4.0}),
        ],
        "ceiling": [(0.5, {})],
    }
    figures = per_million_figures(runs, 500_000)
    assert figures["eos"] == {
        "rows_per_s": 500_000,
        "cpu_s_per_million": {"spark": 6.0, "postgres": 4.0, "total": 8.0},
        "runs_seconds": [2.0, 1.0, 4.0],
    }
    assert figures["ceiling"]["cpu_s_per_million"] is None


def test_a_path_without_cpu_figures_reports_none() -> None:
    p = PathTiming("plain", 10)
    p.record(1.0, {})
    assert cpu_per_million({"plain": p}) == {"plain": None}


def test_each_path_is_a_fraction_of_the_ceilings() -> None:
    noop, python = PathTiming("n", 100), PathTiming("p", 100)
    noop.record(0.1, {})
    python.record(0.5, {})
    eos = PathTiming("eos", 100)
    eos.record(1.0, {})
    figures = ceiling_figures(noop, python, {"eos": eos})
    assert figures["of_python_ceiling"] == {"eos": 0.5}
    assert figures["of_noop_ceiling"] == {"eos": 0.1}
    assert (figures["ceiling_noop_rows_per_s"], figures["ceiling_python_rows_per_s"]) == (1000, 200)


def test_a_tree_is_the_root_and_its_descendants_only() -> None:
    table = {1: (0, 0.0), 2: (1, 0.0), 3: (2, 0.0), 4: (0, 0.0), 5: (4, 0.0)}
    assert _tree(2, table) == {2, 3}
    assert _tree(1, table) == {1, 2, 3}
    assert _tree(9, table) == set()


def test_the_meter_sees_this_process_burn_cpu() -> None:
    began = time.process_time()
    with CpuMeter({"self-again": os.getpid()}).measure() as used:
        sum(i * i for i in range(2_000_000))
    burned = time.process_time() - began
    # /proc counts in clock ticks (10 ms): the meter sees what this process burned, to a tick
    assert used["spark"] >= burned - 0.02, (used, burned)
    assert used["total"] >= used["spark"] + used["self-again"] - 1e-9, used


# Measured in a fresh interpreter: a pytest worker may have a JVM child of its own (a Spark
# session an earlier test in that worker started), which would rightly count as ``spark_jvm``.
_SPLIT_PROBE = """
import json, subprocess, sys
from bench.ceiling import CpuMeter

burn = "sum(i * i for i in range(3_000_000)); print('burned', flush=True); input()"
worker = subprocess.Popen(
    [sys.executable, "-c", burn], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
)
try:
    with CpuMeter({"server": None}).measure() as used:
        sum(i * i for i in range(1_000_000))
        assert worker.stdout.readline() == "burned\\n"
finally:
    worker.communicate("\\n", timeout=30)  # alive until measured: not reaped into ours
print(json.dumps(used))
"""


def test_the_spark_tree_is_split_into_driver_jvm_and_python_workers() -> None:
    """Where a path's CPU goes inside Spark: this process (the driver), the ``java``
    processes (the JVM), the rest (Python workers); the parts sum to ``spark`` and are not
    counted again in ``total``."""
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[2]
    probe = subprocess.run(
        [sys.executable, "-c", _SPLIT_PROBE], cwd=root, capture_output=True, text=True, timeout=60
    )
    assert probe.returncode == 0, probe.stderr
    used = json.loads(probe.stdout)
    parts = used["spark_driver"] + used["spark_jvm"] + used["spark_python_workers"]
    assert abs(parts - used["spark"]) < 1e-6, used
    assert used["spark_driver"] > 0 and used["spark_python_workers"] > 0, used
    assert used["spark_jvm"] == 0, used
    assert used["total"] == used["spark"], used


def test_a_server_started_by_the_benchmark_leaves_the_spark_tree() -> None:
    # 1 the driver, 2 the JVM, 3 a Python worker, 4 a redis-server the driver started, 5 its
    # child; 9 a server elsewhere
    table = {1: (0, 0.0), 2: (1, 0.0), 3: (2, 0.0), 4: (1, 0.0), 5: (4, 0.0), 9: (0, 0.0)}
    trees = _trees({"spark": 1, "redis_records": 4, "redis": 9}, table)
    assert trees == {"spark": {1, 2, 3}, "redis_records": {4, 5}, "redis": {9}}
    # the same process under two names counts under both (nothing is taken out)
    assert _trees({"spark": 1, "again": 1}, table) == {
        "spark": {1, 2, 3, 4, 5},
        "again": {1, 2, 3, 4, 5},
    }


def test_the_ceilings_figures_hold_cpu_for_the_paths_and_both_ceilings() -> None:
    ceilings = Ceilings(100, CpuMeter())
    ceilings.noop.record(0.1, {"cpu": {"spark": 0.1, "total": 0.1, "wall": 0.1}})
    ceilings.python.record(0.5, {"cpu": {"spark": 0.3, "total": 0.3, "wall": 0.5}})
    eos = _path("eos", 100, [1.0], [2.0])
    figures = ceilings.figures({"eos": eos})
    assert figures["of_python_ceiling"] == {"eos": 0.5}
    assert figures["cpu_s_per_million"]["ceiling_python"] == {"spark": 3000.0, "total": 3000.0}
    assert set(figures["cpu_s_per_million"]) == {"eos", "ceiling_python", "ceiling_noop"}


RESULTS = {
    # as bench/kafka.py writes it: paths with their runs only
    "kafka": {
        "rows": 1000,
        "paths": {"eos": {"runs_seconds": [2.0, 1.0]}, "spark": {"runs_seconds": [0.5]}},
        "ceiling_python_rows_per_s": 4000,
        "ceiling_noop_rows_per_s": 8000,
        "of_python_ceiling": {"eos": 0.25, "spark": 0.5},
        "of_noop_ceiling": {"eos": 0.125, "spark": 0.25},
        "cpu_s_per_million": {"eos": {"spark": 9.0, "total": 10.0}, "spark": None},
    },
    # as the other benchmarks write it (PathTiming.as_dict)
    "redis": {
        "rows": 10,
        "paths": {"eos": {"rows_per_s": 50}, "plain": {"rows_per_s": 80}},
        "ceiling_python_rows_per_s": 100,
        "ceiling_noop_rows_per_s": 200,
        "of_python_ceiling": {"eos": 0.5, "plain": 0.8},
        "of_noop_ceiling": {"eos": 0.25, "plain": 0.4},
        "cpu_s_per_million": {},
    },
    "postgres": {"rows": 10, "eos_rows_per_s": 5},  # from before the ceilings
}


def test_every_path_and_both_ceilings_read_back_from_a_results_file() -> None:
    figures = {p.path: p for p in path_figures(RESULTS["kafka"])}
    assert list(figures) == ["eos", "spark", "ceiling_python", "ceiling_noop"]
    assert figures["eos"].rows_per_s == 1000.0  # rows / the fastest run
    assert figures["eos"].cpu_total == 10.0
    assert figures["spark"].cpu_total is None
    assert (figures["ceiling_python"].of_python, figures["ceiling_python"].of_noop) == (1.0, 0.5)
    assert (figures["ceiling_noop"].of_python, figures["ceiling_noop"].of_noop) == (2.0, 1.0)
    assert path_figures(RESULTS["postgres"]) == []


def test_each_sink_and_its_baseline_against_the_ceilings_in_benchmark_order() -> None:
    sinks = sink_ceilings(RESULTS)
    assert [(s.benchmark, s.sink, s.baseline.path) for s in sinks] == [
        ("kafka", "KafkaSink", "spark"),
        ("redis", "RedisSink", "plain"),
    ]
    redis = sinks[1]
    assert (redis.ours.rows_per_s, redis.baseline.of_python, redis.noop_rows_per_s) == (
        50.0,
        0.8,
        200.0,
    )


def test_the_dedup_benchmarks_variants_stand_against_its_streaming_ceilings() -> None:
    from bench.dedup import CEILINGS, VARIANTS, e2e_figures

    runs = {name: _path(name, 1000, [1.0, 0.5], [4.0, 2.0]) for name in (*CEILINGS, *VARIANTS)}
    runs["ceiling_noop"] = _path("ceiling_noop", 1000, [0.1], [0.2])
    figures = e2e_figures(runs, repeat=2)
    assert figures["e2e"]["dedup_on"]["rows_per_s"] == 2000
    assert figures["of_python_ceiling"]["dedup_on"] == 1.0
    assert figures["of_noop_ceiling"]["spark_dedup"] == 0.2
    assert figures["ceiling_noop_rows_per_s"] == 10_000
    sinks = sink_ceilings({"dedup": {**figures, "rows": 1000}})
    assert [(s.sink, s.ours.rows_per_s, s.baseline.path) for s in sinks] == [
        ("PostgresSink, dedup end to end", 2000.0, "spark_dedup")
    ]


def test_a_stage_profile_is_written_with_its_machine_and_versions(tmp_path: Path) -> None:
    figures = per_million_figures({"eos": [(2.0, {"spark": 1.0, "total": 1.0})]}, 1_000_000)
    path = write_stage_profile("stages_x", {"rows": 1_000_000, "paths": figures}, 0.5,
                               ("pyarrow",), tmp_path)  # fmt: skip
    data = json.loads(path.read_text())
    assert data["benchmark"] == "stages_x" and data["paths"] == figures
    assert data["machine"]["load_average_1m"][0] == 0.5 and "pyarrow" in data["versions"]
