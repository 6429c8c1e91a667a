"""kill -9 a real PySpark job writing KEYLESS log lines (``id_from="content"``) into
PostgreSQL, at named points and once at a seeded random moment; restart; audit by writes.

The lines repeat within a file (identical log lines), never across files (each file is one
epoch and its lines carry the file's own numbers), so the table must hold every input line
exactly as many times as the input has it; every record ID is written once (the audit
trigger), and the IDs are the ones the Python twin computes per epoch. ``mode="append"``:
no unique index, so exactly-once rests on the head, the shard markers, the catalog and the
IDs being the same in every re-run of an epoch. ``mode="insert"``: content IDs are never
null, so the sink skips the shuffle by ID and writes each Spark partition as it is, with no
shard marker; a re-run writes every partition again and the unique index makes each record
already written a no-op. The audit counts committed attempts, so it sees those re-writes and
checks them exactly (:func:`tests.support.audit.assert_rewrites`): epoch 2 (killed after its
task committed) attempted twice whole, at most one more epoch for the random kill, nothing
else, and every record inserted once.
"""

from __future__ import annotations

import json
import random
from collections import Counter
from pathlib import Path
from typing import Any

import psycopg
import pytest
from pyspark.sql.types import LongType, StringType, StructField, StructType

from exactlyonce.connectors import PostgresSink
from exactlyonce.dedup.content import content_record_ids
from tests.crash.harness import Job, crash_seed, files_holding, one_file_epochs
from tests.support.audit import assert_exactly_once, assert_rewrites, install_audit

pytestmark = [pytest.mark.crash, pytest.mark.integration]

FILES, ROWS = 7, 40
Line = tuple[Any, ...]
# job_common.SCHEMA's columns: here a host, a number and a message, none of them a key
COLUMNS = ("event_id", "amount", "action")


def keyless_input(directory: Path, seed: int) -> list[list[dict[str, Any]]]:
    """One JSON-lines file per epoch, drawn from few values (many identical lines, nulls
    included); ``amount`` carries the file's number, so no line repeats across files."""
    rng = random.Random(seed)
    directory.mkdir(parents=True)
    files = []
    for n in range(FILES):
        lines = [
            {
                "event_id": rng.choice(["web-1", "web-2", None]),
                "amount": n * 1000 + rng.randint(0, 3),
                "action": rng.choice(["disk full", "GET /", None]),
            }
            for _ in range(ROWS)
        ]
        tmp = directory.parent / f".{n:04d}.json.tmp"
        tmp.write_text("\n".join(json.dumps(line) for line in lines) + "\n")
        tmp.rename(directory / f"part-{n:04d}.json")
        files.append(lines)
    return files


def line_counts(rows: list[Line]) -> Counter[Line]:
    return Counter(tuple(r) for r in rows)


@pytest.mark.parametrize("mode", ["append", "insert"])
def test_keyless_lines_through_kills_at_points_and_a_random_kill(
    tmp_path: Path, pg_dsn: str, pg: psycopg.Connection[Any], unique_name: str, mode: str
) -> None:
    seed = crash_seed()
    files = keyless_input(tmp_path / "input", seed)
    identical = sum(len(f) - len({tuple(r.values()) for r in f}) for f in files)
    assert identical > FILES * 5, "the input must have identical lines within epochs"
    sink = PostgresSink(pg_dsn, unique_name, None, unique_name, id_from="content", mode=mode)  # type: ignore[arg-type]
    sink.preflight(
        StructType(
            [
                StructField("event_id", StringType()),
                StructField("amount", LongType()),
                StructField("action", StringType()),
            ]
        )
    )
    install_audit(pg, unique_name)
    job = Job(tmp_path, unique_name, pg_dsn, mode=mode, extra_args=("--id-from", "content"))

    # mid_copy: a shard's transaction dies open; after_shard_commit: one shard of the epoch
    # committed, the re-run must give its rows the same IDs to skip them (4 runs: ~60 s).
    job.kill_at_points([("mid_copy", 1), ("after_shard_commit", 2)])
    job.kill_randomly(random.Random(seed), seed, runs=1, first=1)
    assert len(job.kills) == 3, f"kills that happened: {job.kills} (seed {seed})"
    job.run_to_end()

    table = pg.execute(f'SELECT {", ".join(COLUMNS)} FROM "{unique_name}"').fetchall()
    wanted = [tuple(r[c] for c in COLUMNS) for f in files for r in f]
    assert line_counts(table) == line_counts(wanted), f"lines differ (seed {seed})"
    expected = {i for f in files for i in content_record_ids(f)}
    assert len(expected) == FILES * ROWS
    reattempted = None
    if mode == "insert":  # no shard marker: what the unique index absorbs, exactly
        holders = files_holding(
            job.checkpoint, {n: set(content_record_ids(f)) for n, f in enumerate(files)}
        )
        single = one_file_epochs(job.checkpoint)
        reattempted = assert_rewrites(pg, unique_name, holders, {2}, 1, single)
    assert_exactly_once(pg, unique_name, expected, reattempted)
    head = pg.execute(
        "SELECT epoch FROM exactlyonce_heads WHERE query_name = %s", [unique_name]
    ).fetchone()
    # After a kill Spark may read two files in one epoch: FILES - 1 epochs at the most.
    assert head == (job.last_commit(),) and job.last_commit() <= FILES - 1
