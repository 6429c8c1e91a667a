"""The end of ``exactlyonce chaos``: the one-line verdict and the JSON report.

The verdict is ``CHAOS: EXACTLY ONCE (...)`` only when the sink's audit says exactly once
(no duplicate, nothing missing or unexpected, dead letters as expected) and the last run
and drain ended well; the faults that were scheduled but missed are named in it either way.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from exactlyonce.integration.audit import SinkAudit, audit_json
from exactlyonce.integration.lab.chaos.harness import Outcome
from exactlyonce.integration.lab.chaos.schedule import (
    DRAINER_KILL,
    DRIVER_KILL,
    LOST_REPLY,
    POINT_KILL,
    REFUSE,
    SERVER_CLEAN,
    SERVER_HARD,
    SERVER_KINDS,
    STALL,
    WORKER_KILL,
)
from exactlyonce.integration.lab.chaos.servers import Server, Skipped


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

    @property
    def missed(self) -> list[Outcome]:
        return [o for o in self.outcomes if not o.happened]

    @property
    def exactly_once(self) -> bool:
        return not self.failure and self.audit is not None and self.audit.ok


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


def describe_faults(outcomes: list[Outcome]) -> str:
    """``20 faults: 11 driver kills, 5 named-point kills, 2 pg restarts (1 hard, 1 clean)``."""
    counts = fault_counts(outcomes)
    parts = []
    if counts[DRIVER_KILL]:
        parts.append(_many(counts[DRIVER_KILL], "driver kill"))
    if counts[POINT_KILL]:
        parts.append(_many(counts[POINT_KILL], "named-point kill"))
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
    """The one line: ``CHAOS: EXACTLY ONCE (seed 42, 20 faults: ...; 6000 IDs, 0
    duplicates, 0 missing)`` or ``CHAOS: FAILED (...)``."""
    head = "EXACTLY ONCE" if report.exactly_once else "FAILED"
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
    if report.failure:
        found.append(report.failure.splitlines()[0])
    faults = describe_faults(report.outcomes)
    return f"CHAOS: {head} (seed {report.seed}, {faults}; {', '.join(found)})"


def report_json(report: ChaosReport) -> dict[str, Any]:
    """The report as one JSON document (see the README's chaos section for its fields)."""
    counts = fault_counts(report.outcomes)
    return {
        "pipeline": report.pipeline,
        "seed": report.seed,
        "kills_requested": report.kills,
        "exactly_once": report.exactly_once,
        "verdict": verdict(report),
        "faults_happened": len(report.outcomes) - len(report.missed),
        "faults_missed": len(report.missed),
        "counts": {
            "driver_kills": counts[DRIVER_KILL],
            "point_kills": counts[POINT_KILL],
            "server_hard": sum(
                1 for o in report.outcomes if o.happened and o.fault.kind == SERVER_HARD
            ),
            "server_clean": sum(
                1 for o in report.outcomes if o.happened and o.fault.kind == SERVER_CLEAN
            ),
            "lost_replies": counts[LOST_REPLY],
            "refusals": counts[REFUSE],
            "stalls": counts[STALL],
            "worker_kills": counts[WORKER_KILL],
            "drainer_kills": counts[DRAINER_KILL],
        },
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
        "audit": audit_json(report.audit) if report.audit is not None else None,
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
        "note": o.note,
        "run": o.run,
        "at_s": o.at_s,
    }
