"""The soak's pure parts: its input (replays at least the fraction asked) and its matrix."""

from __future__ import annotations

import json
from pathlib import Path

from bench.soak_input import write_input
from bench.soak_report import cell_entry, markdown, matrix


def _rows(directory: Path) -> list[dict[str, object]]:
    return [
        json.loads(line)
        for path in sorted(directory.glob("soak-part-*.json"))
        for line in path.read_text().splitlines()
    ]


def test_input_replays_at_least_the_fraction_and_holds_every_event(tmp_path: Path) -> None:
    made = write_input(tmp_path / "in", 5000, seed=7, files=12, replay_fraction=0.25)
    rows = _rows(tmp_path / "in")
    ids = [r["event_id"] for r in rows if r["event_id"] is not None]
    assert made.files == 12 and made.records == len(rows)
    assert len(set(ids)) == 5000  # every distinct event, no other
    assert len(ids) - 5000 == made.resent >= 0.25 * 5000
    assert made.null_keys == 3 == sum(1 for r in rows if r["event_id"] is None)
    again = write_input(tmp_path / "again", 5000, seed=7, files=12, replay_fraction=0.25)
    assert _rows(tmp_path / "again") == rows and again == made  # replayable from the seed


def _report(seed: int, duplicates: int) -> dict[str, object]:
    return {
        "seed": seed,
        "counts": {"driver_kills": 2, "point_kills": 1, "server_hard": 1, "server_clean": 0},
        "faults_happened": 4,
        "faults_missed": 0,
        "runs": 5,
        "seconds": 10.0,
        "exactly_once": duplicates == 0,
        "verdict": "CHAOS: ...",
        "audit": {"expected_ids": 100, "duplicates": duplicates, "missing": 0},
    }


def test_matrix_sums_a_sinks_runs_and_names_failed_seeds() -> None:
    cells = [cell_entry("pg", "seed", _report(s, d), {}) for s, d in ((1, 0), (2, 3))]
    (row,) = matrix(cells)
    assert (row["chaos_runs"], row["runs"], row["faults"], row["ids"]) == (2, 10, 8, 200)
    assert (row["duplicates"], row["failed_seeds"], row["verdict"]) == (3, [2], "FAILED")
    table = markdown([row], {"pg": "note"})
    assert "| pg (note) | 2 | 10 | 8: 4 / 2 / 2 / 0 | 200 | 3 | 0 | 20 s | FAILED |" in table
