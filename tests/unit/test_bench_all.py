"""bench/all.py (`make bench`): every step names a benchmark `python -m bench` knows, and
every benchmark the table reads has a step that writes its results file."""

from __future__ import annotations

import importlib

from bench.__main__ import STANDALONE, build_parser
from bench.all import STEPS, duration
from bench.table import BENCHMARKS

RESULTS_FILE = {"cluster_catalog": "cluster"}  # the benchmark whose file has another name


def test_every_step_is_a_known_benchmark_and_every_table_row_has_a_step() -> None:
    subcommands = set(build_parser()._subparsers._group_actions[0].choices)  # type: ignore[union-attr]
    assert {s.name for s in STEPS} <= subcommands | set(STANDALONE)
    assert {RESULTS_FILE.get(s.name, s.name) for s in STEPS} == set(BENCHMARKS)


def test_durations_read_as_minutes_and_seconds() -> None:
    assert duration(0) == "0m00s"
    assert duration(754.6) == "12m35s"


def test_the_stage_profiles_run_from_the_bench_command() -> None:
    assert STANDALONE["postgres_stages"] == "bench.postgres_stages"
    assert importlib.import_module("bench.postgres_stages").NAME == "postgres_stages"
