"""The demo's exactly-once audit of its PostgreSQL pipeline: the sink's table, dead-letter
table and head against the expected record IDs (read by
:mod:`exactlyonce.connectors.postgres.audit`, as ``exactlyonce audit`` reads them), with the
demo's input and kill counts, and the verdict."""

from __future__ import annotations

import os
from dataclasses import dataclass

from exactlyonce.connectors import registry
from exactlyonce.integration.audit import read_expected
from exactlyonce.integration.config import PipelineConfig
from exactlyonce.integration.config.sinks import build_sink
from exactlyonce.integration.lab.demo.pipeline import pg_sink


@dataclass
class Audit:
    """What the sink holds against what it should; :attr:`ok` is the verdict."""

    query_name: str
    sink: str
    expected_ids: int
    rows: int
    distinct_ids: int
    missing: int
    unexpected: int
    dead_letters: int
    head_epoch: int | None
    expected_dead_letters: int | None = None
    input_records: int | None = None
    kills: int | None = None

    @property
    def duplicates(self) -> int:
        return self.rows - self.distinct_ids

    @property
    def dead_letters_ok(self) -> bool:
        return self.expected_dead_letters is None or self.dead_letters == self.expected_dead_letters

    @property
    def ok(self) -> bool:
        """Exactly once: no duplicate, nothing missing or unexpected, dead letters as expected."""
        return (
            self.duplicates == 0
            and self.missing == 0
            and self.unexpected == 0
            and self.dead_letters_ok
        )


def read_audit(
    cfg: PipelineConfig,
    expected: set[str],
    *,
    expected_dead_letters: int | None = None,
    input_records: int | None = None,
    kills: int | None = None,
) -> Audit:
    """What the sink's table, dead-letter table and head hold, against the expected IDs
    (read by :func:`exactlyonce.connectors.postgres.audit.read_postgres`).

    Read-only; a table not created yet counts as empty."""
    pg_sink(cfg)  # the demo's PostgreSQL pipeline, or a ConfigError naming the field
    sink = build_sink(cfg.sink, check=False)  # no connection: for its names only
    found = registry.kind_of(sink).audit_reader()(sink, dict.fromkeys(expected, []))
    return Audit(
        query_name=cfg.query_name,
        sink=found.sink,
        expected_ids=len(expected),
        rows=found.read,
        distinct_ids=found.distinct_ids,
        missing=len(found.missing_ids),
        unexpected=len(found.unexpected_ids),
        dead_letters=found.dead_letters or 0,
        head_epoch=found.head_epoch,
        expected_dead_letters=expected_dead_letters,
        input_records=input_records,
        kills=kills,
    )


def print_audit(a: Audit, *, result: bool = True) -> None:
    """The audit as a table, ending with ``RESULT: EXACTLY ONCE`` or ``RESULT: FAILED``
    (unless ``result`` is off: the demo prints one verdict for all its audits)."""

    def line(label: str, value: object, note: str = "") -> None:
        shown = "-" if value is None else value
        print(f"  {label:<22}{shown:>10}  {note}".rstrip())

    epochs = None if a.head_epoch is None else a.head_epoch + 1
    print(f"AUDIT {a.query_name} -> {a.sink}")
    if a.input_records is not None:
        line("input records", a.input_records)
    line("distinct IDs expected", a.expected_ids)
    line("rows in sink", a.rows)
    line("distinct record_ids", a.distinct_ids)
    line("duplicates", a.duplicates, "must be 0")
    line("missing", a.missing, "must be 0")
    line("unexpected IDs", a.unexpected, "must be 0")
    expected_dl = "" if a.expected_dead_letters is None else f"must be {a.expected_dead_letters}"
    line("dead letters", a.dead_letters, expected_dl)
    if a.kills is not None:
        line("kills (SIGKILL)", a.kills)
    line("epochs committed", epochs, "" if epochs is None else f"head epoch {a.head_epoch}")
    if result:
        print(f"  RESULT: {'EXACTLY ONCE' if a.ok else 'FAILED'}")


def read_expected_ids(path: str | os.PathLike[str]) -> set[str]:
    """Record IDs from a file of keys: one per line, a bare value or a JSON array of values."""
    return set(read_expected(path))
