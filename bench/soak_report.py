"""The soak's results: one entry per chaos run (a cell of the fault matrix), aggregated per
sink into ``bench/results/chaos.json``, and the matrix as a Markdown table.

A cell holds what its ``exactlyonce chaos --json`` report says: the sink and the mode it
ran (``write_mode``), the pipeline's ``source`` type and where its record IDs come from
(``id_from``: ``columns``, ``content``, or ``source`` for a Kafka source's coordinates), its
seed and IDs, the kills of the pipeline itself (``pipeline_kills``: driver, named-point,
commit-window, worker and drainer kills) apart from ``server_restarts`` (hard and clean;
``broker_failovers``: those of them that struck the node holding a role on the 3-node Kafka
cluster), ``worker_kills`` and whether the cell ran on the standalone cluster (``cluster``),
the faults missed, the duplicates, missing and unexpected records as the INDEPENDENT reader
(``reader``: a client the sink does not use) counted them, and the negative control's
duplicates under the same schedule (``control_duplicates``). A cell passes only when chaos's
verdict is EXACTLY ONCE (a clean audit, no fault missed, a control that shows duplicates)
and, for a seeded cell, it made at least the pipeline kills asked for.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

COUNT_KEYS = (
    "driver_kills",
    "point_kills",
    "commit_kills",
    "server_hard",
    "server_clean",
    "lost_replies",
    "refusals",
    "stalls",
    "worker_kills",
    "drainer_kills",
)
# The kills of the pipeline itself (not of a server): they count toward a cell's kills.
PIPELINE_KILL_KEYS = (
    "driver_kills",
    "point_kills",
    "commit_kills",
    "worker_kills",
    "drainer_kills",
)
PASSED = "EXACTLY ONCE"


def cell_entry(
    sink: str, mode: str, report: dict[str, Any], extra: dict[str, Any]
) -> dict[str, Any]:
    """One chaos run's figures from its ``--json`` report."""
    audit = report.get("audit") or {}
    control = report.get("control") or {}
    servers = sorted({s["service"] for s in report.get("servers", [])})
    kinds = {k: report["counts"].get(k, 0) for k in COUNT_KEYS}
    return {
        "sink": sink,
        "write_mode": report.get("write_mode"),
        "source": report.get("source"),  # the pipeline's source type (files, kafka)
        "id_from": report.get("id_from"),  # where its record IDs come from
        "mode": mode,  # "seed" (a --kills run) or "duration" (a --duration run)
        "seed": report["seed"],
        "ids": report.get("ids", audit.get("expected_ids")),
        "pipeline_kills": report.get("pipeline_kills", sum(kinds[k] for k in PIPELINE_KILL_KEYS)),
        "server_restarts": report.get(
            "server_restarts", kinds["server_hard"] + kinds["server_clean"]
        ),
        "broker_failovers": report.get("broker_failovers", 0),
        "worker_kills": kinds["worker_kills"],
        "commit_window_kills": report.get("commit_window_kills"),
        "faults": report["faults_happened"],
        "faults_missed": report["faults_missed"],
        "faults_not_started": report.get("faults_not_started", 0),
        "duplicates": report.get("duplicates", audit.get("duplicates")),
        "missing": report.get("missing", audit.get("missing")),
        "unexpected": report.get("unexpected", audit.get("unexpected")),
        "reader": report.get("reader"),
        "rewritten": report.get("rewritten"),  # Elasticsearch _version > 1, in place
        "audit_duplicates": audit.get("duplicates"),  # the project's own reader, beside it
        "control_duplicates": report.get("control_duplicates"),
        "control_commit_window_kills": report.get("control_commit_window_kills"),
        "control_faults_missed": control.get("faults_missed"),
        "control_pipeline_kills": control.get("pipeline_kills"),
        "fault_kinds": kinds,
        "servers_restarted": servers,
        "server_faults_skipped": report.get("skipped_servers", []),
        "runs": report["runs"],
        "dead_letters": audit.get("dead_letters"),
        "expected_dead_letters": audit.get("expected_dead_letters"),
        "seconds": report["seconds"],
        "result": report.get("result", PASSED if report["exactly_once"] else "FAILED"),
        "exactly_once": report["exactly_once"],
        "not_evidence": report.get("not_evidence", []),
        "verdict": report["verdict"],
        "failure": report.get("failure"),
        **extra,
    }


def cell_verdict(cell: dict[str, Any]) -> str:
    """A cell's own verdict: chaos's (EXACTLY ONCE, INCONCLUSIVE, FAILED), or TOO FEW KILLS
    for a seeded cell below the pipeline kills it asked for. A cell without a control (run
    before there was one) is INCONCLUSIVE."""
    result = str(cell.get("result") or (PASSED if cell.get("exactly_once") else "FAILED"))
    if result == PASSED and not cell.get("control_duplicates"):
        result = "INCONCLUSIVE"
    if result == PASSED and cell.get("faults_missed"):
        result = "INCONCLUSIVE"
    asked = int(cell.get("kills_requested") or 0)
    if result == PASSED and cell.get("mode") == "seed" and _kills(cell) < asked:
        result = "TOO FEW KILLS"
    return result


def _kills(cell: dict[str, Any]) -> int:
    kills = cell.get("pipeline_kills")
    if kills is None:  # a cell from before pipeline kills were counted
        kinds = cell.get("fault_kinds") or {}
        kills = sum(kinds.get(k, 0) for k in PIPELINE_KILL_KEYS)
    return int(kills)


def matrix(cells: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per sink: chaos runs, faults by kind, pipeline kills (and the fewest in one seeded
    run), kills in the commit window, server restarts, IDs, duplicates, missing, the
    control's duplicates (and the fewest in one run), seconds, and the verdict: FAILED,
    INCONCLUSIVE or TOO FEW KILLS when any cell is, else EXACTLY ONCE."""
    rows: dict[str, dict[str, Any]] = {}
    for c in cells:
        row = rows.setdefault(
            c["sink"],
            {"sink": c["sink"], "write_mode": c.get("write_mode"), "source": c.get("source"),
             "id_from": c.get("id_from"), "reader": c.get("reader"),
             "chaos_runs": 0, "runs": 0, "faults": 0, "faults_missed": 0, "ids": 0,
             "duplicates": 0, "missing": 0, "unexpected": 0, "seconds": 0.0,
             "pipeline_kills": 0, "fewest_pipeline_kills": None, "server_restarts": 0,
             "broker_failovers": 0, "cluster_runs": 0,
             "commit_window_kills": 0, "control_duplicates": 0,
             "fewest_control_duplicates": None, "control_commit_window_kills": 0,
             "failed_seeds": [], "inconclusive_seeds": [], "short_seeds": [],
             **{k: 0 for k in COUNT_KEYS}},
        )  # fmt: skip
        row["chaos_runs"] += 1
        for k in ("runs", "faults", "faults_missed", "seconds"):
            row[k] += c[k]
        for k in COUNT_KEYS:
            row[k] += c["fault_kinds"].get(k, 0)
        for k in ("ids", "duplicates", "missing", "unexpected", "server_restarts",
                  "broker_failovers", "commit_window_kills",
                  "control_commit_window_kills"):  # fmt: skip
            row[k] += c.get(k) or 0
        row["cluster_runs"] += 1 if c.get("cluster") else 0
        _count_kills(row, c)
        verdict = cell_verdict(c)
        if verdict != PASSED:
            which = {"FAILED": "failed_seeds", "TOO FEW KILLS": "short_seeds"}
            row[which.get(verdict, "inconclusive_seeds")].append(c["seed"])
    for row in rows.values():
        row["seconds"] = round(row["seconds"], 1)
        row["verdict"] = (
            "FAILED" if row["failed_seeds"]
            else "INCONCLUSIVE" if row["inconclusive_seeds"]
            else "TOO FEW KILLS" if row["short_seeds"]
            else PASSED
        )  # fmt: skip
    return list(rows.values())


def _count_kills(row: dict[str, Any], cell: dict[str, Any]) -> None:
    """Add a cell's pipeline kills and control duplicates to its row, with the fewest in a
    seeded cell (pipeline kills) and in any cell (control duplicates)."""
    kills = _kills(cell)
    row["pipeline_kills"] += kills
    control = int(cell.get("control_duplicates") or 0)
    row["control_duplicates"] += control
    fewest = row["fewest_control_duplicates"]
    row["fewest_control_duplicates"] = control if fewest is None else min(fewest, control)
    if cell.get("mode") == "seed":
        fewest = row["fewest_pipeline_kills"]
        row["fewest_pipeline_kills"] = kills if fewest is None else min(fewest, kills)


def markdown(rows: list[dict[str, Any]], notes: dict[str, str]) -> str:
    """The matrix as a Markdown table (paste into the README)."""
    lines = [
        "| sink | mode | chaos runs (on the cluster) | runs "
        "| pipeline kills (fewest in a seeded run) "
        "| in the commit window | server restarts (broker failovers) "
        "| faults (driver / point / commit / server hard / clean / lost reply "
        "/ refusal / stall / worker / drainer) | IDs "
        "| duplicates | missing | control duplicates (fewest) | time | verdict |",
        "|---|---|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|---|",
    ]
    for r in rows:
        kinds = " / ".join(str(r[k]) for k in COUNT_KEYS)
        missed = f", {r['faults_missed']} missed" if r["faults_missed"] else ""
        note = f" ({notes[r['sink']]})" if r["sink"] in notes else ""
        lines.append(
            f"| {r['sink']}{note} | {_mode(r)} "
            f"| {r['chaos_runs']} ({r.get('cluster_runs', 0)}) | {r['runs']} "
            f"| {r['pipeline_kills']} ({r['fewest_pipeline_kills']}) "
            f"| {r['commit_window_kills']} "
            f"| {r['server_restarts']} ({r.get('broker_failovers', 0)}) "
            f"| {r['faults']}: {kinds}{missed} "
            f"| {r['ids']:,} | {r['duplicates']} | {r['missing']} "
            f"| {r['control_duplicates']} ({r['fewest_control_duplicates']}) "
            f"| {r['seconds']:.0f} s | {r['verdict']} |"
        )
    return "\n".join(lines)


def _mode(row: dict[str, Any]) -> str:
    """The sink's write mode, with a source other than files and where its IDs come from."""
    if row.get("source") in (None, "files"):
        return str(row["write_mode"])
    return f"{row['write_mode']}, {row['source']} source, id_from {row.get('id_from')}"


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
