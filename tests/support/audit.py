"""Write auditing for PostgreSQL targets: count committed insert ATTEMPTS per record ID.

A BEFORE INSERT row trigger appends every row proposed for insertion to ``<table>_audit``, in
the same transaction, and returns the row (so the insert goes on). It fires before the unique
index is checked, so it also sees the rows ``INSERT ... ON CONFLICT DO NOTHING`` skips: a
second write that the unique key turns into a no-op is still one more committed attempt. A
rolled-back attempt (transaction or savepoint) leaves nothing, exactly like the data. An
AFTER INSERT row trigger also appends the rows really inserted to ``<table>_inserts``; it
never fires for a row ON CONFLICT skipped, which is why the duplicate check reads attempts.

:func:`assert_exactly_once` requires exactly one committed attempt per expected ID (and one
inserted row). A path that by design writes a committed record again and lets the unique
index absorb it (a re-run without shard markers) shows up here as two attempts: name those
IDs in ``reattempted`` so the test states what it expects, exactly.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from typing import Any

import psycopg
from psycopg import sql

from exactlyonce.dedup.murmur3 import spark_shard


def _log_trigger(
    conn: psycopg.Connection[Any], table: str, log: str, when: str, id_column: str
) -> None:
    fn, trigger = f"{log}_fn", f"{log}_trg"
    conn.execute(
        sql.SQL(
            "CREATE TABLE IF NOT EXISTS {} (record_id text NOT NULL, app text, "
            "at timestamptz DEFAULT clock_timestamp(), epoch bigint)"
        ).format(sql.Identifier(log))
    )
    # BEFORE must return NEW (a null would cancel the insert); AFTER's return is ignored. The
    # row's epoch column, where the table has one (the sink's tables do), goes along.
    conn.execute(
        sql.SQL(
            "CREATE OR REPLACE FUNCTION {fn}() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
            "INSERT INTO {log} (record_id, app, epoch) VALUES (NEW.{col}::text, "
            "current_setting('application_name'), (to_jsonb(NEW) ->> 'epoch')::bigint); "
            "RETURN NEW; END $$"
        ).format(fn=sql.Identifier(fn), log=sql.Identifier(log), col=sql.Identifier(id_column))
    )
    conn.execute(
        sql.SQL("CREATE TRIGGER {} {} INSERT ON {} FOR EACH ROW EXECUTE FUNCTION {}()").format(
            sql.Identifier(trigger), sql.SQL(when), sql.Identifier(table), sql.Identifier(fn)
        )
    )


def install_audit(conn: psycopg.Connection[Any], table: str, id_column: str = "record_id") -> str:
    """The attempts log (BEFORE INSERT) and the inserts log (AFTER INSERT) on ``table``;
    returns the attempts log's name."""
    audit = f"{table}_audit"
    _log_trigger(conn, table, audit, "BEFORE", id_column)
    _log_trigger(conn, table, f"{table}_inserts", "AFTER", id_column)
    return audit


def _counts(conn: psycopg.Connection[Any], log: str) -> dict[str, int]:
    rows = conn.execute(
        sql.SQL("SELECT record_id, count(*) FROM {} GROUP BY record_id").format(sql.Identifier(log))
    ).fetchall()
    return {str(rid).replace("-", ""): int(n) for rid, n in rows}


def write_counts(conn: psycopg.Connection[Any], table: str) -> dict[str, int]:
    """Committed insert attempts per record ID (uuid text form, hyphens removed), the ones
    ON CONFLICT DO NOTHING skipped included."""
    return _counts(conn, f"{table}_audit")


def insert_counts(conn: psycopg.Connection[Any], table: str) -> dict[str, int]:
    """Rows really inserted per record ID (an ON CONFLICT skip is not one)."""
    return _counts(conn, f"{table}_inserts")


def attempt_epochs(conn: psycopg.Connection[Any], table: str) -> dict[str, Counter[int]]:
    """Per record ID, its committed insert attempts per epoch they carried (the row's
    ``epoch`` column; a table without one: none)."""
    rows = conn.execute(
        sql.SQL("SELECT record_id, epoch, count(*) FROM {} GROUP BY 1, 2").format(
            sql.Identifier(f"{table}_audit")
        )
    ).fetchall()
    out: dict[str, Counter[int]] = {}
    for rid, epoch, n in rows:
        counts = out.setdefault(str(rid).replace("-", ""), Counter())
        if epoch is not None:
            counts[int(epoch)] += int(n)
    return out


def row_epochs(
    conn: psycopg.Connection[Any], table: str, id_column: str = "record_id"
) -> dict[str, int]:
    """Per record ID stored in ``table``, its row's epoch."""
    rows = conn.execute(
        sql.SQL("SELECT {}::text, epoch FROM {}").format(
            sql.Identifier(id_column), sql.Identifier(table)
        )
    ).fetchall()
    return {str(rid).replace("-", ""): int(epoch) for rid, epoch in rows}


def sink_ids(conn: psycopg.Connection[Any], table: str, id_column: str = "record_id") -> list[str]:
    rows = conn.execute(
        sql.SQL("SELECT {}::text FROM {}").format(sql.Identifier(id_column), sql.Identifier(table))
    ).fetchall()
    return [str(r[0]).replace("-", "") for r in rows]


def assert_exactly_once(
    conn: psycopg.Connection[Any],
    table: str,
    expected: set[str],
    reattempted: Mapping[str, int | range] | None = None,
) -> None:
    """The table holds ``expected``, each ID in one row, attempted once and inserted once.
    ``reattempted`` names the IDs a test expects attempted more than once, where the design
    lets the unique index absorb a re-write: their exact count, or the range it may take."""
    ids = sink_ids(conn, table)
    attempts = write_counts(conn, table)
    inserts = insert_counts(conn, table)
    assert len(ids) == len(set(ids)), f"{len(ids) - len(set(ids))} duplicate rows in {table}"
    allowed = {
        i: range(n, n + 1) if isinstance(n, int) else n for i, n in (reattempted or {}).items()
    }
    duplicates = {i: n for i, n in attempts.items() if n not in allowed.get(i, range(1, 2))}
    assert not duplicates, (
        f"{len(duplicates)} IDs written more than once (committed attempts, ON CONFLICT "
        f"skips included), or not as often as expected: {list(duplicates.items())[:5]}"
    )
    twice = {i: n for i, n in inserts.items() if n > 1}
    assert not twice, f"{len(twice)} IDs inserted more than once: {list(twice.items())[:5]}"
    missing = expected - set(ids)
    unexpected = set(ids) - expected
    assert not missing, f"{len(missing)} expected IDs missing from {table}"
    assert not unexpected, f"{len(unexpected)} unexpected IDs in {table}"
    assert set(attempts) == expected, "audit trail differs from the expected set"
    assert set(inserts) == expected, "inserts log differs from the expected set"


def assert_rewrites(
    conn: psycopg.Connection[Any],
    table: str,
    holders: Counter[tuple[str, int]],
    named: set[int],
    random_kills: int,
    one_task: set[int],
) -> dict[str, int]:
    """For a path without shard markers (the format API, the unaligned insert path), where
    the unique index absorbs what is written again: every record ID is attempted

    - only in its own row's epoch (the catalog keeps later epochs from sending it again);
    - at most once per task of that epoch holding it (``holders``: tasks of one epoch that
      run at once do not see each other's IDs in the catalog), and all of that once more
      when a run died after the epoch's tasks committed and before the head advanced;
    - more often than its tasks (written again) exactly in the ``named`` epochs, whose kill
      came after their commit, and in at most ``random_kills`` others; every ID of a named
      epoch that is in ``one_task`` (one task wrote it all) is attempted exactly twice.

    Returns the IDs attempted more than once, with their counts, for
    :func:`assert_exactly_once`'s ``reattempted``."""
    attempts = attempt_epochs(conn, table)
    stored = row_epochs(conn, table)
    elsewhere = {i: dict(c) for i, c in attempts.items() if set(c) != {stored.get(i)}}
    assert not elsewhere, (
        f"attempted in another epoch than its row's: {list(elsewhere.items())[:5]}"
    )
    count = {i: sum(c.values()) for i, c in attempts.items()}
    tasks = {i: holders[(i, stored[i])] for i in count}
    too_many = {i: n for i, n in count.items() if n > 2 * tasks[i]}
    assert not too_many, f"attempted more than twice per task: {list(too_many.items())[:5]}"
    again = {stored[i] for i, n in count.items() if n > tasks[i]}
    assert named <= again, f"epochs {sorted(named - again)} not written again after their kill"
    assert len(again - named) <= random_kills, f"epochs written again: {sorted(again)}"
    once = {i for i in count if stored[i] in named & one_task and count[i] != 2}
    assert not once, f"{len(once)} IDs of a one-task epoch written again attempted once"
    print(f"epochs written again, the unique index absorbing it: {sorted(again)}", flush=True)
    return {i: n for i, n in count.items() if n > 1}


def assert_forgotten_rewrites(
    conn: psycopg.Connection[Any], table: str, holding: Mapping[str, list[int]], shards: int
) -> dict[str, int]:
    """For insert mode (shard markers, a unique index) through ONE loss of the dedup catalog
    at an unknown moment: the empty catalog forgets what was written before, so a later
    epoch holding such a record sends it again and the index absorbs it. Checked, with
    ``holding`` (per record ID, every epoch whose input holds it) and the sink's ``shards``:

    - each ID's own row epoch attempted once (the shard markers), at most one attempt more;
    - every second attempt in a later epoch than the row's, and all of them after all the
      rows they repeat (one loss: rows up to epoch ``lo``, re-sends from epoch ``hi`` on);
    - each re-sent in the first epoch after the loss that holds it (the catalog knows it
      again once it is sent), and none missed: every ID written before epoch ``lo`` and
      held by an epoch after the loss is sent again.

    The loss may strike inside epoch ``hi``, between its shards: a shard of ``hi`` that
    committed before it (the one with no re-send) rightly skipped what it held. Shards are
    the sink's own (``pmod(hash(id), shards)``), so the IDs such a shard held are known.

    And the epoch the loss struck in runs again (the sink retries it): a shard of it that
    committed before the loss is not written again, but every ID it held is marked in the new
    catalog (what it wrote and what it skipped: all of it is in the table), so a later epoch
    holding one of those does not send it. The IDs not sent are allowed only if ONE epoch
    from ``lo`` to ``hi`` held them all, in shards with no re-send there (the loss's epoch).

    Returns the IDs attempted twice, for :func:`assert_exactly_once`'s ``reattempted``."""
    attempts = attempt_epochs(conn, table)
    stored = row_epochs(conn, table)
    count = {i: sum(c.values()) for i, c in attempts.items()}
    own = {i: dict(c) for i, c in attempts.items() if c[stored[i]] != 1 or count[i] > 2}
    assert not own, f"attempted twice in its own epoch, or thrice: {list(own.items())[:5]}"
    again = {i: max(c) for i, c in attempts.items() if count[i] == 2}
    if not again:
        return {}
    lo, hi = max(stored[i] for i in again), min(again.values())
    assert lo < hi, f"re-sent in epoch {hi}, before rows of epoch {lo} it forgot: two losses?"
    shard = _shards_of(list(holding), shards)
    after_loss = {shard[i] for i, g in again.items() if g == hi}  # hi's shards that re-sent

    def first_after_loss(i: str) -> int | None:
        later = [e for e in holding[i] if e > hi or (e == hi and shard[i] in after_loss)]
        return min(later, default=None)

    late = {i: g for i, g in again.items() if first_after_loss(i) != g}
    assert not late, f"re-sent after the first epoch that held it again: {list(late.items())[:5]}"
    missed = {
        i
        for i, row in stored.items()
        if row < lo and i not in again and first_after_loss(i) is not None
    }
    if missed:
        relearned = _loss_epoch_holding(missed, holding, shard, after_loss, lo, hi)
        assert relearned is not None, (
            f"{len(missed)} forgotten IDs held again and not sent: the catalog knew?"
        )
        print(f"{len(missed)} forgotten IDs re-marked by epoch {relearned}'s re-run, not sent")
    print(f"catalog loss between epochs {lo} and {hi}: {len(again)} records sent again, absorbed")
    return dict.fromkeys(again, 2)


def _loss_epoch_holding(
    ids: set[str],
    holding: Mapping[str, list[int]],
    shard: Mapping[str, int],
    after_loss: set[int],
    lo: int,
    hi: int,
) -> int | None:
    """The first epoch from ``lo`` to ``hi`` that held every one of ``ids`` in a shard that
    sent nothing again there (in ``hi``: a shard not in ``after_loss``), or None."""
    for epoch in range(lo, hi + 1):
        if all(epoch in holding[i] and (epoch < hi or shard[i] not in after_loss) for i in ids):
            return epoch
    return None


def _shards_of(ids: list[str], shards: int) -> dict[str, int]:
    """Each record ID's shard, as the sink assigns it."""
    return dict(zip(ids, spark_shard(ids, shards).tolist(), strict=True))
