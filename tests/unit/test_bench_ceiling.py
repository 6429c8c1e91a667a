"""The benchmarks' ceilings and CPU figures, as pure logic (and /proc on this machine)."""

from __future__ import annotations

import os

from bench.ceiling import CpuMeter, _tree, ceiling_figures, cpu_per_million
from bench.common import PathTiming


def _path(name: str, rows: int, seconds: list[float], totals: list[float]) -> PathTiming:
    p = PathTiming(name, rows)
    for s, total in zip(seconds, totals, strict=True):
        p.record(s, {"cpu": {"spark": total - 1, "broker": 1.0, "total": total, "wall": s}})
    return p


def test_cpu_per_million_takes_the_median_run_per_tree() -> None:
    p = _path("eos", 500_000, [1.0, 2.0, 3.0], [9.0, 5.0, 7.0])
    assert cpu_per_million({"eos": p}) == {"eos": {"spark": 12.0, "broker": 2.0, "total": 14.0}}


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
    with CpuMeter({"self-again": os.getpid()}).measure() as used:
        sum(i * i for i in range(2_000_000))
    assert used["spark"] > 0.05
    assert used["total"] >= used["spark"] + used["self-again"] - 1e-9
