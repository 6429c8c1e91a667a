"""The exactly-once audit, read back from PostgreSQL: the sink's table, dead-letter table and
head against the expected record IDs, and the verdict. Also used by ``exactlyonce audit``."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql

from exactlyonce.connectors.postgres.schema import DEAD_LETTERS, TableName, regclass
from exactlyonce.dedup.ids import record_id
from exactlyonce.integration.config import PipelineConfig
from exactlyonce.integration.demo.pipeline import pg_sink
from exactlyonce.progress import Progress

AUDIT_CHUNK_ROWS = 50_000


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
    """What the sink's table, dead-letter table and head hold, against the expected IDs.

    Read-only; a table not created yet counts as empty."""
    sink = cfg.build_sink(check=False)  # no connection: for its names only
    table = TableName.parse(pg_sink(cfg).table)
    with psycopg.connect(pg_sink(cfg).dsn.get_secret_value(), autocommit=True) as conn:
        ids = _sink_ids(conn, table, pg_sink(cfg).id_column, len(expected))
        dead = _count_dead_letters(conn, table, cfg.query_name, sink.sink_name)
    head = sink.head() if dead is not None else None
    found = set(ids)
    return Audit(
        query_name=cfg.query_name,
        sink=sink.sink_name,
        expected_ids=len(expected),
        rows=len(ids),
        distinct_ids=len(found),
        missing=len(expected - found),
        unexpected=len(found - expected),
        dead_letters=dead or 0,
        head_epoch=head.epoch if head else None,
        expected_dead_letters=expected_dead_letters,
        input_records=input_records,
        kills=kills,
    )


def _sink_ids(
    conn: psycopg.Connection[Any], table: TableName, id_column: str, expected: int
) -> list[str]:
    """Every row's record ID (hex, no dashes), duplicates kept; none if no table yet. Read
    through a server-side cursor in chunks, with the rows read against the ``expected`` count
    (:class:`~exactlyonce.progress.Progress`: a bar on a terminal, plain lines elsewhere)."""
    if regclass(conn, table) is None:
        return []
    query = sql.SQL("SELECT replace({}::text, '-', '') FROM {}").format(
        sql.Identifier(id_column), table.ident()
    )
    ids: list[str] = []
    with (
        Progress(f"audit {table}", total=expected, unit="rows") as progress,
        conn.transaction(),
        conn.cursor(name="exactlyonce_audit") as cursor,
    ):
        cursor.execute(query)
        while rows := cursor.fetchmany(AUDIT_CHUNK_ROWS):
            ids.extend(str(r[0]) for r in rows)
            progress.update(len(rows))
    return ids


def _count_dead_letters(
    conn: psycopg.Connection[Any], table: TableName, query_name: str, sink_name: str
) -> int | None:
    if regclass(conn, TableName(table.schema, DEAD_LETTERS)) is None:
        return None
    row = conn.execute(
        sql.SQL("SELECT count(*) FROM {} WHERE query_name = %s AND sink = %s").format(
            table.sibling(DEAD_LETTERS)
        ),
        [query_name, sink_name],
    ).fetchone()
    return int(row[0]) if row else 0


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
    ids = set()
    for raw in Path(path).read_text(encoding="utf-8").splitlines():
        line = raw.strip()
        if not line:
            continue
        try:
            parsed = json.loads(line)
        except json.JSONDecodeError:
            parsed = line
        values = parsed if isinstance(parsed, list) else [parsed]
        ids.add(record_id(values))
    return ids
