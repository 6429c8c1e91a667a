"""The benchmarks page's soak section says how much of the full soak ran, cell by cell."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType
from typing import Any

ROOT = Path(__file__).resolve().parents[2]


def _generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gen_benchmarks", ROOT / "docs/gen_benchmarks.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _cell(sink: str, seed: int, mode: str = "seed", **extra: Any) -> dict[str, Any]:
    clean = not extra.get("duplicates")
    return {
        "exactly_once": clean, "result": "EXACTLY ONCE" if clean else "FAILED",
        "sink": sink, "seed": seed, "mode": mode, "write_mode": "append", "cluster": seed == 1,
        "ids": 100_000, "pipeline_kills": 20, "commit_window_kills": 9, "worker_kills": 4,
        "server_restarts": 4, "faults_missed": 0, "duplicates": 0, "missing": 0,
        "unexpected": 0, "reader": "psycopg", "control_duplicates": 8_700,
        "wall_seconds": 875.0, "verdict": "CHAOS: EXACTLY ONCE (seed 1, ...)", "runs": 17,
        "kills_requested": 20, **extra,
    }  # fmt: skip


def _doc(cells: list[dict[str, Any]]) -> dict[str, Any]:
    gen = _generator()
    matrix = [{"sink": "pg", "pipeline_kills": 40, "verdict": "EXACTLY ONCE"}]
    return {
        "fingerprint": "f" * 16, "parameters": {"seeds": 5, "events": 100_000, "kills": 20},
        "full_parameters": {"seeds": 5}, "dates": ["d1", "d2"], "matrix": matrix,
        "cells": cells, "stale_cells": [], "notes": {}, "_gen": gen,
    }  # fmt: skip


def test_a_partial_soak_says_it_is_incomplete_and_lists_what_is_left() -> None:
    doc = _doc([_cell("pg", 1), _cell("pg", 2)])
    page = "\n".join(doc.pop("_gen").soak_section(doc))
    assert (
        "**Incomplete: 2 of the full soak's 60 cells have run on code `ffffffffffffffff`**" in page
    )
    assert "pg (seed 3, seed 4, seed 5, the duration run)" in page
    assert "every cell of kafka, kafka3, es, os, redis, buffer, pg-ks-source" in page


def test_every_cell_gets_its_own_row_with_reader_and_control() -> None:
    doc = _doc([_cell("pg", 2), _cell("pg", 1, duplicates=3)])
    page = doc.pop("_gen").soak_section(doc)
    rows = [line for line in page if line.startswith("| pg | append |")]
    assert len(rows) == 2
    first, second = rows  # sorted by seed
    assert "| 1 | yes |" in first and "3 / 0 / 0" in first and "FAILED" in first
    assert "| 2 | no |" in second and "0 / 0 / 0" in second and "EXACTLY ONCE" in second
    assert "| psycopg | 8,700 |" in second


def test_a_full_soak_says_so() -> None:
    gen = _generator()
    cells = [_cell(sink, seed, mode) for sink, seed, mode in gen.planned_cells({})]
    doc = _doc(cells)
    page = "\n".join(doc.pop("_gen").soak_section(doc))
    assert "All 60 cells of the full soak ran on code `ffffffffffffffff`." in page
    assert "Incomplete" not in page


def test_a_soak_of_earlier_code_says_the_package_changed_since() -> None:
    doc = _doc([_cell("pg", 1)])  # fingerprint "fff...", not the code in this checkout
    page = "\n".join(doc.pop("_gen").soak_section(doc))
    assert "**The package has changed since this soak ran**" in page
    assert "CHANGELOG.md" in page


def test_a_soak_of_this_code_says_so() -> None:
    gen = _generator()
    gen._import_bench()
    from bench.soak_resume import code_fingerprint

    doc = _doc([_cell("pg", 1)])
    doc["fingerprint"] = code_fingerprint(ROOT)
    page = "\n".join(doc.pop("_gen").soak_section(doc))
    assert "changed since" not in page
    assert f"The package in this checkout is the code it ran (`{doc['fingerprint']}`)." in page
