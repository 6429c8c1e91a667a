"""The end of ``exactlyonce chaos``: the one-line verdict and the JSON report.

Three verdicts, each a line ``CHAOS: <VERDICT> (...)``:

- ``FAILED``: our sink's audit (the project's reader, and the independent reader: a client
  we did not write, in the mode where a second write shows) found a duplicate, a missing or
  an unexpected record, or the last run or drain failed;
- ``INCONCLUSIVE``: the audit is clean but the run is not evidence: a scheduled fault did
  not happen (in our runs or in the control's; each is named), or the negative control did
  not run, failed, or shows no duplicate (a schedule under which a plain at-least-once
  writer writes nothing twice proves nothing about ours);
- ``EXACTLY ONCE``: a clean audit, every fault happened, and the control, under the same
  schedule, shows duplicates.

Only ``EXACTLY ONCE`` exits 0. Kills are counted as PIPELINE kills (the driver at a random
moment, at a named point or as a commit becomes visible, a worker with its executor, the
drainer), apart from SERVER restarts (hard and clean); the kills that landed in the commit
window (between a sink commit and Spark's commit log) are counted for both sides.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from exactlyonce.integration.audit import SinkAudit, audit_json
from exactlyonce.integration.lab.chaos.control.reading import Tally
from exactlyonce.integration.lab.chaos.harness import Outcome
from exactlyonce.integration.lab.chaos.schedule import (
    COMMIT_KILL,
    DRAINER_KILL,
    DRIVER_KILL,
    LOST_REPLY,
    PIPELINE_KILL_KINDS,
    POINT_KILL,
    REFUSE,
    SERVER_CLEAN,
    SERVER_HARD,
    SERVER_KINDS,
    STALL,
    WORKER_KILL,
)
from exactlyonce.integration.lab.chaos.servers import Server, Skipped

EXACTLY_ONCE, INCONCLUSIVE, FAILED = "EXACTLY ONCE", "INCONCLUSIVE", "FAILED"


@dataclass
class ControlReport:
    """The negative control's side: the same schedule against a plain at-least-once writer
    of the same records (:mod:`.control`), and its independent reading (``tally``: writes
    beyond the records sent are its duplicates)."""

    target: str
    outcomes: list[Outcome]
    tally: Tally | None
    failure: str = ""
    runs: int = 0
    runs_died: int = 0

    @property
    def missed(self) -> list[Outcome]:
        return [o for o in self.outcomes if not o.happened]

    @property
    def duplicates(self) -> int | None:
        return None if self.tally is None else self.tally.duplicates


@dataclass
class ChaosReport:
    """Everything one chaos run did and found."""

    pipeline: str
    seed: int
    kills: int  # faults asked for
    outcomes: list[Outcome]
    audit: SinkAudit | None
    failure: str = ""  # the last run or the drain failed: what it said
    servers: list[Server] = field(default_factory=list)
    skipped: list[Skipped] = field(default_factory=list)
    runs: int = 0
    runs_died: int = 0
    seconds: float = 0.0
    sink: str = ""  # the sink's type
    write_mode: str = ""
    source: str = ""  # the source's type (files, kafka, ...)
    id_from: str = ""  # where record IDs come from: columns, content, source
    independent: Tally | None = None  # our sink read by a client we did not write
    independent_skipped: str = ""  # why there is no independent reading
    control: ControlReport | None = None
    control_skipped: str = ""  # why no control ran
    not_started: int = 0  # --duration: faults never started (never part of this run)

    @property
    def missed(self) -> list[Outcome]:
        return [o for o in self.outcomes if not o.happened]

    @property
    def audit_clean(self) -> bool:
        """Our sink holds each expected record once, as both readers see it."""
        clean = not self.failure and self.audit is not None and self.audit.ok
        return clean and (self.independent is None or self.independent.ok)

    def not_evidence(self) -> list[str]:
        """Why a clean audit is no proof here (empty: it is)."""
        why = [f"fault {o.fault.n} ({o.fault.kind}) MISSED" for o in self.missed]
        control = self.control
        if control is None:
            why.append(f"no negative control ({self.control_skipped or 'not run'})")
            return why
        why += [f"control fault {o.fault.n} ({o.fault.kind}) MISSED" for o in control.missed]
        if control.failure:
            why.append(f"the control failed: {control.failure.splitlines()[0]}")
        if control.duplicates is None:
            why.append("the control's destination could not be read")
        elif control.duplicates == 0:
            why.append("the control shows 0 duplicates")
        return why

    @property
    def result(self) -> str:
        if not self.audit_clean:
            return FAILED
        return INCONCLUSIVE if self.not_evidence() else EXACTLY_ONCE

    @property
    def exactly_once(self) -> bool:
        """The verdict is EXACTLY ONCE (the only one that exits 0)."""
        return self.result == EXACTLY_ONCE


# The other kinds in the verdict line, in this order: (kind, what one is called).
OTHER_KINDS = (
    (LOST_REPLY, "lost reply"),
    (REFUSE, "refusal"),
    (STALL, "stall"),
    (WORKER_KILL, "worker kill"),
    (DRAINER_KILL, "drainer kill"),
)


def fault_counts(outcomes: list[Outcome]) -> Counter[str]:
    """Faults that happened, by ``<server>_restart`` (with ``<server>_hard``/
    ``<server>_clean`` beside them) and by kind for the others."""
    counts: Counter[str] = Counter()
    for o in outcomes:
        if not o.happened:
            continue
        if o.fault.kind in SERVER_KINDS:
            counts[f"{o.fault.server}_restart"] += 1
            how = "hard" if o.fault.kind == SERVER_HARD else "clean"
            counts[f"{o.fault.server}_{how}"] += 1
        else:
            counts[o.fault.kind] += 1
    return counts


def pipeline_kills(outcomes: list[Outcome]) -> int:
    """Kills of the pipeline itself that happened: its driver (random, at a named point, as
    a commit became visible), a worker with its executor, its drainer."""
    return sum(1 for o in outcomes if o.happened and o.fault.kind in PIPELINE_KILL_KINDS)


def server_restarts(outcomes: list[Outcome]) -> int:
    """Server restarts (hard and clean) that happened."""
    return sum(1 for o in outcomes if o.happened and o.fault.kind in SERVER_KINDS)


def broker_failovers(outcomes: list[Outcome]) -> int:
    """Server restarts that happened as failovers: of the node holding a role on a cluster."""
    return sum(
        1
        for o in outcomes
        if o.happened and o.fault.kind in SERVER_KINDS and o.fault.target is not None
    )


def window_kills(outcomes: list[Outcome]) -> int:
    """Kills that landed between a sink commit and Spark's commit log."""
    return sum(1 for o in outcomes if o.in_window)


def describe_faults(outcomes: list[Outcome]) -> str:
    """``20 faults: 11 driver kills, 5 named-point kills, 2 pg restarts (1 hard, 1 clean)``."""
    counts = fault_counts(outcomes)
    parts = []
    if counts[DRIVER_KILL]:
        parts.append(_many(counts[DRIVER_KILL], "driver kill"))
    if counts[POINT_KILL]:
        parts.append(_many(counts[POINT_KILL], "named-point kill"))
    if counts[COMMIT_KILL]:
        parts.append(_many(counts[COMMIT_KILL], "commit kill"))
    servers = sorted(k.removesuffix("_restart") for k in counts if k.endswith("_restart"))
    for s in servers:
        n, hard, clean = counts[f"{s}_restart"], counts[f"{s}_hard"], counts[f"{s}_clean"]
        parts.append(f"{_many(n, s + ' restart')} ({hard} hard, {clean} clean)")
    parts += [_many(counts[kind], what) for kind, what in OTHER_KINDS if counts[kind]]
    missed = sum(1 for o in outcomes if not o.happened)
    if missed:
        parts.append(f"{missed} MISSED")
    done = _many(len(outcomes) - missed, "fault")
    return done + (f": {', '.join(parts)}" if parts else "")


def _many(n: int, what: str) -> str:
    return f"{n} {what}{'' if n == 1 else 's'}"


def verdict(report: ChaosReport) -> str:
    """The one line: ``CHAOS: EXACTLY ONCE (seed 42, 20 faults: ...; 14 pipeline kills (3 in
    the commit window), 4 server restarts; 6000 IDs, 0 duplicates, 0 missing; control: 41
    duplicates, 3 kills in the commit window)``, ``CHAOS: INCONCLUSIVE (...; not evidence:
    ...)`` or ``CHAOS: FAILED (...)``."""
    found = []
    a = report.audit
    if a is not None:
        found.append(
            f"{len(a.expected)} IDs, {a.duplicates} duplicates, {len(a.missing_ids)} missing"
        )
        if a.unexpected_ids:
            found.append(f"{len(a.unexpected_ids)} unexpected")
        if a.unattributable:
            found.append(f"{a.unattributable} unattributable")
        if not a.dead_letters_ok:
            found.append(f"{a.dead_letters} dead letters, {a.expected_dead_letters} expected")
    t = report.independent
    if t is not None:
        unexpected = f", {len(t.unexpected_keys)} unexpected" if t.unexpected_keys else ""
        found.append(
            f"independent read: {t.duplicates} duplicates, {len(t.missing_keys)} missing"
            f"{unexpected}"
        )
    if report.failure:
        found.append(report.failure.splitlines()[0])
    kills = (
        f"{_many(pipeline_kills(report.outcomes), 'pipeline kill')} "
        f"({window_kills(report.outcomes)} in the commit window), "
        f"{_many(server_restarts(report.outcomes), 'server restart')}"
    )
    tail = ""
    control = report.control
    if control is not None and control.duplicates is not None:
        tail = (
            f"; control: {control.duplicates} duplicates, "
            f"{window_kills(control.outcomes)} kills in the commit window"
        )
    why = report.not_evidence() if report.result == INCONCLUSIVE else []
    if why:
        tail += f"; not evidence: {', '.join(why)}"
    faults = describe_faults(report.outcomes)
    body = f"seed {report.seed}, {faults}; {kills}; {', '.join(found)}{tail}"
    return f"CHAOS: {report.result} ({body})"


def report_json(report: ChaosReport) -> dict[str, Any]:
    """The report as one JSON document (see docs/operations/chaos.md for its fields)."""
    a, t, control = report.audit, report.independent, report.control
    found: tuple[int | None, int | None, int | None] = (None, None, None)
    if t is not None:
        found = (t.duplicates, len(t.missing_keys), len(t.unexpected_keys))
    elif a is not None:
        found = (a.duplicates, len(a.missing_ids), len(a.unexpected_ids))
    duplicates, missing, unexpected = found
    return {
        "pipeline": report.pipeline,
        "sink": report.sink,
        "write_mode": report.write_mode,
        "source": report.source,
        "id_from": report.id_from,
        "seed": report.seed,
        "ids": len(a.expected) if a is not None else (t.expected if t is not None else None),
        "kills_requested": report.kills,
        "result": report.result,
        "exactly_once": report.exactly_once,
        "verdict": verdict(report),
        "not_evidence": report.not_evidence(),
        "pipeline_kills": pipeline_kills(report.outcomes),
        "server_restarts": server_restarts(report.outcomes),
        "broker_failovers": broker_failovers(report.outcomes),
        "worker_kills": fault_counts(report.outcomes)[WORKER_KILL],
        "commit_window_kills": window_kills(report.outcomes),
        "faults_happened": len(report.outcomes) - len(report.missed),
        "faults_missed": len(report.missed),
        "faults_not_started": report.not_started,
        "duplicates": duplicates,
        "missing": missing,
        "unexpected": unexpected,
        "reader": t.reading.reader if t is not None else None,
        # records written more than once in place (Elasticsearch _version > 1): not a second
        # record to any reader; op_type index re-sends a re-run shard by design
        "rewritten": t.reading.rewritten if t is not None else None,
        "independent_skipped": report.independent_skipped or None,
        "control_duplicates": control.duplicates if control is not None else None,
        "control_commit_window_kills": (
            window_kills(control.outcomes) if control is not None else None
        ),
        "counts": _counts_json(report.outcomes),
        "faults": [_outcome_json(o) for o in report.outcomes],
        "servers": [
            {"service": s.service, "address": s.address, "roles": list(s.roles)}
            for s in report.servers
        ],
        "skipped_servers": [
            {"role": s.role, "address": s.address, "why": s.why} for s in report.skipped
        ],
        "runs": report.runs,
        "runs_died": report.runs_died,
        "failure": report.failure or None,
        "seconds": round(report.seconds, 1),
        "audit": audit_json(a) if a is not None else None,
        "independent": t.json() if t is not None else None,
        "control": _control_json(control) if control is not None else None,
        "control_skipped": report.control_skipped or None,
    }


def _counts_json(outcomes: list[Outcome]) -> dict[str, int]:
    counts = fault_counts(outcomes)
    return {
        "driver_kills": counts[DRIVER_KILL],
        "point_kills": counts[POINT_KILL],
        "commit_kills": counts[COMMIT_KILL],
        "server_hard": sum(1 for o in outcomes if o.happened and o.fault.kind == SERVER_HARD),
        "server_clean": sum(1 for o in outcomes if o.happened and o.fault.kind == SERVER_CLEAN),
        "lost_replies": counts[LOST_REPLY],
        "refusals": counts[REFUSE],
        "stalls": counts[STALL],
        "worker_kills": counts[WORKER_KILL],
        "drainer_kills": counts[DRAINER_KILL],
    }


def _control_json(c: ControlReport) -> dict[str, Any]:
    return {
        "target": c.target,
        "duplicates": c.duplicates,
        "pipeline_kills": pipeline_kills(c.outcomes),
        "server_restarts": server_restarts(c.outcomes),
        "broker_failovers": broker_failovers(c.outcomes),
        "commit_window_kills": window_kills(c.outcomes),
        "faults_happened": len(c.outcomes) - len(c.missed),
        "faults_missed": len(c.missed),
        "counts": _counts_json(c.outcomes),
        "faults": [_outcome_json(o) for o in c.outcomes],
        "runs": c.runs,
        "runs_died": c.runs_died,
        "failure": c.failure or None,
        "independent": c.tally.json() if c.tally is not None else None,
    }


def _outcome_json(o: Outcome) -> dict[str, Any]:
    f = o.fault
    return {
        "n": f.n,
        "kind": f.kind,
        "point": f.point,
        "server": f.server,
        "target": f.target,
        "epochs": f.epochs,
        "delay_s": f.delay_s,
        "down_s": f.down_s,
        "happened": o.happened,
        "in_window": o.in_window,
        "note": o.note,
        "run": o.run,
        "at_s": o.at_s,
    }
