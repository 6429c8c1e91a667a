"""bench/table.py: the one table `make bench` prints, built from results files only.

A ratio below its target shows NOT MET, one above it met; a "lower is better" figure
(``<=``) the other way round; a missing results file shows a ``missing`` line; a figure
without a target shows ``-`` and is not counted.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.table import BENCHMARKS, Row, build_rows, format_table, main

POSTGRES = {
    "date": "2026-11-26T09:00:00+00:00",
    "eos_vs_spark_jdbc": 0.881,
    "eos_vs_raw_copy": 0.9,
    "targets": {
        "eos_vs_spark_jdbc": {"target": 1.0, "measured": 0.881, "met": False},
        "eos_vs_raw_copy": {"target": 0.8, "measured": 0.9, "met": True},
    },
}
RECOVERY = {
    "date": "2026-11-26T09:30:00+00:00",
    "curve": [
        {"catalog_ids": 1_000_000, "extra_s": 0.4, "catalog": {"bytes_per_id": 60.0}},
        {"catalog_ids": 10_000_000, "extra_s": 1.7, "catalog": {"bytes_per_id": 28.5}},
    ],
    "target": {"extra_s_at_most": 1.0, "extra_spread_between_sizes_s": 1.3},
}
BUFFER = {
    "sinks": {
        "redis": {
            "buffered_vs_fast_p99": 1.593,
            "target_buffered_vs_fast_p99": 1.2,
            "drain_vs_direct": 1.343,
            "target_drain_vs_direct": 0.8,
        }
    }
}


def by_figure(rows: list[Row], benchmark: str) -> dict[str, Row]:
    return {r.figure: r for r in rows if r.benchmark == benchmark}


def test_recovery_is_judged_against_the_plain_copy_restart_when_the_results_have_it() -> None:
    anchored = {
        "curve": [
            {"catalog_ids": 1_000_000, "extra_s": 2.0, "extra_vs_plain_copy_s": 0.3},
            {"catalog_ids": 10_000_000, "extra_s": 2.5, "extra_vs_plain_copy_s": 0.9},
        ],
        "target": {
            "extra_s_at_most": 1.0,
            "extra_vs_plain_copy_s_at_most": 0.5,
            "extra_vs_plain_copy_spread_between_sizes_s": 0.6,
            "spread_s_at_most": 0.5,
        },
    }
    rows = by_figure(build_rows({"recovery": anchored}), "recovery")
    assert rows["start to first write, ours - plain COPY's, 1,000,000 IDs"].status == "met"
    assert rows["start to first write, ours - plain COPY's, 10,000,000 IDs"].status == "NOT MET"
    assert rows["spread of that difference between sizes"].status == "NOT MET"
    context = rows["start to first write, ours - Spark's, 1,000,000 IDs"]
    assert context.target is None, "the noop figures are context, not judged"


def test_a_ratio_below_its_target_is_not_met_and_one_above_is_met() -> None:
    rows = by_figure(build_rows({"postgres": POSTGRES}), "postgres")
    assert rows["ours / Spark JDBC writer"].status == "NOT MET"
    assert rows["ours / plain COPY"].status == "met"
    assert rows["ours / Spark JDBC writer"].target_text == ">= 1x"


def test_lower_is_better_figures_are_judged_the_other_way() -> None:
    rows = build_rows({"recovery": RECOVERY, "buffer": BUFFER})
    recovery = by_figure(rows, "recovery")
    assert recovery["start to first write, ours - Spark's, 1,000,000 IDs"].status == "met"
    assert recovery["start to first write, ours - Spark's, 10,000,000 IDs"].status == "NOT MET"
    assert recovery["catalog bytes/ID at 10,000,000 IDs"].status == "met"
    buffer = by_figure(rows, "buffer")
    assert buffer["redis: p99 batch, slow sink behind buffer / fast sink"].status == "NOT MET"
    assert buffer["redis: drainer / direct sink"].status == "met"


def test_missing_results_and_untargeted_figures_are_shown_not_counted() -> None:
    rows = build_rows({"postgres": POSTGRES})
    missing = [r for r in rows if r.status == "missing" and r.figure.endswith(".json")]
    assert {r.benchmark for r in missing} == set(BENCHMARKS) - {"postgres"}
    info = by_figure(rows, "postgres")["format('exactlyonce') / foreachBatch"]
    assert info.status == "missing"  # no figure in this file
    assert Row("x", "y", 0.5).status == "-"
    text = format_table(rows)
    assert "NOT MET" in text
    assert text.splitlines()[-1].startswith("1 of 2 targets met")


def test_the_command_prints_one_table_from_the_results_dir(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "postgres.json").write_text(json.dumps(POSTGRES))
    (tmp_path / "recovery.json").write_text(json.dumps(RECOVERY))
    assert main(["--results-dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    lines = [line for line in out.splitlines() if line.startswith("postgres ")]
    assert any("ours / Spark JDBC writer" in line and "NOT MET" in line for line in lines)
    assert "3 of 5 targets met" in out.splitlines()[-1]
