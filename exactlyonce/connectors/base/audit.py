"""One sink's audit, whatever the sink: what was read (rows, records, documents, keys or
stream entries) counted per record ID against the expected IDs, the dead letters and the
head; printed as a table ending in ``RESULT:``, or as one JSON document."""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from exactlyonce.connectors.base.expected import Expected

NAMED_IDS = 20  # IDs named per kind in the table (the JSON names up to NAMED_IDS_JSON)
NAMED_IDS_JSON = 1000


@dataclass
class SinkAudit:
    """What one sink holds against what it should; :attr:`ok` is the verdict.

    ``counts``: record ID -> how many times it was found (rows, records, entries, keys).
    ``rewritten``: Elasticsearch ``_id`` -> its ``_version`` when above 1 (written more than
    once); a duplicate write when ``rewritten_is_duplicate`` (insert mode, ``op_type:
    create``). ``unattributable``: what was read without a record ID (a Kafka record without
    its ``eo-record-id`` header): each one fails the audit."""

    query_name: str
    sink: str
    kind: str
    read_with: str  # how it was read, shown next to the sink
    unit: str  # label of the count read: "rows in sink", "records read", ...
    expected: Expected
    counts: Counter[str]
    head_epoch: int | None
    dead_letters: int | None
    expected_dead_letters: int | None = None
    unattributable: int = 0
    rewritten: dict[str, int] = field(default_factory=dict)
    rewritten_is_duplicate: bool = False

    @property
    def read(self) -> int:
        return sum(self.counts.values()) + self.unattributable

    @property
    def distinct_ids(self) -> int:
        return len(self.counts)

    @property
    def duplicate_ids(self) -> dict[str, int]:
        """Record ID -> writes found, for every ID found more than once."""
        found = {rid: n for rid, n in self.counts.items() if n > 1}
        if self.rewritten_is_duplicate:
            for rid, version in self.rewritten.items():
                found[rid] = found.get(rid, 1) + version - 1
        return found

    @property
    def duplicates(self) -> int:
        return sum(n - 1 for n in self.duplicate_ids.values())

    @property
    def missing_ids(self) -> list[str]:
        return sorted(rid for rid in self.expected if rid not in self.counts)

    @property
    def unexpected_ids(self) -> list[str]:
        return sorted(rid for rid in self.counts if rid not in self.expected)

    @property
    def dead_letters_ok(self) -> bool:
        return self.expected_dead_letters is None or (
            (self.dead_letters or 0) == self.expected_dead_letters
        )

    @property
    def ok(self) -> bool:
        """Exactly once: no duplicate, nothing missing, unexpected or unattributable, and the
        dead letters as expected."""
        return (
            self.duplicates == 0
            and not self.missing_ids
            and not self.unexpected_ids
            and self.unattributable == 0
            and self.dead_letters_ok
        )

    def name(self, rid: str) -> str:
        """An ID as the user knows it: its key value(s) when expected, else its hex."""
        values = self.expected.get(rid)
        if values is None:
            return rid
        return str(values[0]) if len(values) == 1 else json.dumps(values)


def audit_json(a: SinkAudit) -> dict[str, Any]:
    """The audit as one JSON-able document (IDs named by key value where known)."""
    duplicates = a.duplicate_ids
    return {
        "query_name": a.query_name,
        "sink": a.sink,
        "kind": a.kind,
        "read_with": a.read_with,
        "expected_ids": len(a.expected),
        "read": a.read,
        "distinct_ids": a.distinct_ids,
        "duplicates": a.duplicates,
        "missing": len(a.missing_ids),
        "unexpected": len(a.unexpected_ids),
        "unattributable": a.unattributable,
        "rewritten": len(a.rewritten),
        "dead_letters": a.dead_letters,
        "expected_dead_letters": a.expected_dead_letters,
        "head_epoch": a.head_epoch,
        "ok": a.ok,
        "duplicate_ids": {a.name(r): duplicates[r] for r in sorted(duplicates)[:NAMED_IDS_JSON]},
        "missing_ids": [a.name(r) for r in a.missing_ids[:NAMED_IDS_JSON]],
        "unexpected_ids": [a.name(r) for r in a.unexpected_ids[:NAMED_IDS_JSON]],
    }


def print_sink_audit(a: SinkAudit, *, result: bool = True) -> None:
    """The audit as a table (the PostgreSQL one as the demo has always printed it), the IDs
    at fault named, and ``RESULT: EXACTLY ONCE`` or ``RESULT: FAILED`` unless ``result`` is
    off."""

    def line(label: str, value: object, note: str = "") -> None:
        shown = "-" if value is None else value
        print(f"  {label:<22}{shown:>10}  {note}".rstrip())

    print(f"AUDIT {a.query_name} -> {a.sink}" + (f" ({a.read_with})" if a.read_with else ""))
    line("distinct IDs expected", len(a.expected))
    line(a.unit, a.read)
    line("distinct record_ids", a.distinct_ids)
    line("duplicates", a.duplicates, "must be 0")
    line("missing", len(a.missing_ids), "must be 0")
    line("unexpected IDs", len(a.unexpected_ids), "must be 0")
    if a.kind == "kafka" or a.unattributable:
        line("not attributable", a.unattributable, "must be 0 (read without a record ID)")
    if a.kind == "elasticsearch":
        note = "counted as duplicates (op_type create)" if a.rewritten_is_duplicate else ""
        line("rewritten (_version>1)", len(a.rewritten), note)
    expected_dl = "" if a.expected_dead_letters is None else f"must be {a.expected_dead_letters}"
    line("dead letters", a.dead_letters if a.dead_letters is not None else 0, expected_dl)
    epochs = None if a.head_epoch is None else a.head_epoch + 1
    line("epochs committed", epochs, "" if epochs is None else f"head epoch {a.head_epoch}")
    _name_ids(a)
    if result:
        print(f"  RESULT: {'EXACTLY ONCE' if a.ok else 'FAILED'}", flush=True)


def _name_ids(a: SinkAudit) -> None:
    duplicates = a.duplicate_ids
    named = {
        "duplicate IDs": [f"{a.name(r)} x{duplicates[r]}" for r in sorted(duplicates)],
        "missing IDs": [a.name(r) for r in a.missing_ids],
        "unexpected IDs": [a.name(r) for r in a.unexpected_ids],
    }
    for label, names in named.items():
        if names:
            more = f" (and {len(names) - NAMED_IDS} more)" if len(names) > NAMED_IDS else ""
            print(f"  {label}: {', '.join(names[:NAMED_IDS])}{more}")
