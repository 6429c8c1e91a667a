"""The soak's results: one entry per chaos run (a cell of the fault matrix), aggregated per
sink into ``bench/results/chaos.json``, and the matrix as a Markdown table."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

COUNT_KEYS = (
    "driver_kills",
    "point_kills",
    "server_hard",
    "server_clean",
    "lost_replies",
    "refusals",
    "stalls",
    "worker_kills",
    "drainer_kills",
)
# The faults that SIGKILL a process: the driver, a server, a worker, the drainer.
SIGKILL_KEYS = ("driver_kills", "point_kills", "server_hard", "worker_kills", "drainer_kills")


def cell_entry(
    sink: str, mode: str, report: dict[str, Any], extra: dict[str, Any]
) -> dict[str, Any]:
    """One chaos run's figures from its ``--json`` report."""
    audit = report.get("audit") or {}
    servers = sorted({s["service"] for s in report.get("servers", [])})
    kinds = {k: report["counts"].get(k, 0) for k in COUNT_KEYS}
    return {
        "sink": sink,
        "mode": mode,  # "seed" (a --kills run) or "duration" (a --duration run)
        "seed": report["seed"],
        "fault_kinds": kinds,
        "sigkills": sum(kinds[k] for k in SIGKILL_KEYS),
        "servers_restarted": servers,
        "server_faults_skipped": report.get("skipped_servers", []),
        "faults": report["faults_happened"],
        "faults_missed": report["faults_missed"],
        "runs": report["runs"],
        "ids": audit.get("expected_ids"),
        "duplicates": audit.get("duplicates"),
        "missing": audit.get("missing"),
        "unexpected": audit.get("unexpected"),
        "dead_letters": audit.get("dead_letters"),
        "expected_dead_letters": audit.get("expected_dead_letters"),
        "seconds": report["seconds"],
        "exactly_once": report["exactly_once"],
        "verdict": report["verdict"],
        "failure": report.get("failure"),
        **extra,
    }


def matrix(cells: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per sink: chaos runs, faults by kind, SIGKILLs (and the fewest in one seeded run: a run
    with fewer than it asked for fails the row), IDs, duplicates, missing, seconds, verdict."""
    rows: dict[str, dict[str, Any]] = {}
    for c in cells:
        row = rows.setdefault(
            c["sink"],
            {"sink": c["sink"], "chaos_runs": 0, "runs": 0, "faults": 0, "faults_missed": 0,
             "ids": 0, "duplicates": 0, "missing": 0, "seconds": 0.0, "failed_seeds": [],
             "sigkills": 0, "fewest_sigkills": None, "short_seeds": [],
             **{k: 0 for k in COUNT_KEYS}},
        )  # fmt: skip
        row["chaos_runs"] += 1
        for k in ("runs", "faults", "faults_missed", "seconds", *COUNT_KEYS):
            row[k] += c["fault_kinds"].get(k, 0) if k in COUNT_KEYS else c[k]
        for k in ("ids", "duplicates", "missing"):
            row[k] += c[k] or 0
        if not c["exactly_once"]:
            row["failed_seeds"].append(c["seed"])
        _count_sigkills(row, c)
    for row in rows.values():
        row["seconds"] = round(row["seconds"], 1)
        row["verdict"] = (
            "FAILED" if row["failed_seeds"]
            else "TOO FEW KILLS" if row["short_seeds"]
            else "EXACTLY ONCE"
        )  # fmt: skip
    return list(rows.values())


def _count_sigkills(row: dict[str, Any], cell: dict[str, Any]) -> None:
    """Add a cell's SIGKILLs to its row; a seeded run below its ``kills_requested`` is short."""
    sigkills = cell.get("sigkills")
    if sigkills is None:  # a cell from before SIGKILLs were counted
        sigkills = sum(cell["fault_kinds"].get(k, 0) for k in SIGKILL_KEYS)
    row["sigkills"] += sigkills
    if cell.get("mode") != "seed":
        return
    fewest = row["fewest_sigkills"]
    row["fewest_sigkills"] = sigkills if fewest is None else min(fewest, sigkills)
    if sigkills < int(cell.get("kills_requested") or 0):
        row["short_seeds"].append(cell["seed"])


def markdown(rows: list[dict[str, Any]], notes: dict[str, str]) -> str:
    """The matrix as a Markdown table (paste into the README)."""
    lines = [
        "| sink | chaos runs | runs | SIGKILLs (fewest in a seeded run) "
        "| faults (driver / point / server hard / clean / lost reply "
        "/ refusal / stall / worker / drainer) | IDs "
        "| duplicates | missing | time | verdict |",
        "|---|---:|---:|---:|---|---:|---:|---:|---:|---|",
    ]
    for r in rows:
        kinds = " / ".join(str(r[k]) for k in COUNT_KEYS)
        missed = f", {r['faults_missed']} missed" if r["faults_missed"] else ""
        note = f" ({notes[r['sink']]})" if r["sink"] in notes else ""
        lines.append(
            f"| {r['sink']}{note} | {r['chaos_runs']} | {r['runs']} "
            f"| {r['sigkills']} ({r['fewest_sigkills']}) "
            f"| {r['faults']}: {kinds}{missed} "
            f"| {r['ids']:,} | {r['duplicates']} | {r['missing']} | {r['seconds']:.0f} s "
            f"| {r['verdict']} |"
        )
    return "\n".join(lines)


def write_results(path: Path, doc: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, indent=2) + "\n")


def earlier_cells(path: Path) -> list[dict[str, Any]]:
    """Every cell of the results file, current and stale (the caller sorts them again)."""
    if not path.exists():
        return []
    try:
        doc = json.loads(path.read_text())
    except json.JSONDecodeError:
        return []
    if not isinstance(doc, dict):
        return []
    return [c for c in [*doc.get("cells", []), *doc.get("stale_cells", [])] if isinstance(c, dict)]


def stale_summary(stale: list[dict[str, Any]]) -> str:
    """One line per reason: the cells kept in the file but not in the matrix."""
    if not stale:
        return "No stale cells."
    reasons: dict[str, list[str]] = {}
    for c in stale:
        reasons.setdefault(str(c.get("stale")), []).append(
            f"{c.get('sink')} {c.get('mode')} {c.get('seed')}"
        )
    lines = [f"Stale cells, not in the matrix ({len(stale)}):"]
    lines += [f"- {why}: {', '.join(cells)}" for why, cells in reasons.items()]
    return "\n".join(lines)
