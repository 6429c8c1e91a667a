"""The kill -9 demo (``make demo``): a pipeline SIGKILLed mid-stream still writes exactly once.

::

    python -m exactlyonce.integration.demo [--config examples/pipeline.yaml] [--files 24]
        [--rows-per-file 500] [--kills 3] [--seed N]

1. Fresh state: the pipeline's checkpoint and input directory are removed, its table dropped,
   its Redis dedup catalog deleted, and the query's head, shard-commit and dead-letter rows
   deleted.
2. All input is generated up front (a replayable source, so the expected set is known):
   JSON-lines files with deterministic content from the seed; about a quarter of the records
   repeat an earlier event_id (in the same file or an earlier one), and a few have a null
   event_id, which must land in the dead-letter table.
3. ``exactlyonce run`` runs in its own process group; once the sink's head shows 1-3 new
   epochs (seeded), after a random 0-2 s, the whole group is SIGKILLed and the run restarted,
   ``--kills`` times. The last run goes on until idle.
4. An audit read back from PostgreSQL: no duplicate, nothing missing, every bad record in the
   dead-letter table exactly once. Exit 0 only then.

The services must be up (``make services``); their addresses come from ``service_env()``.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql

from exactlyonce.connectors.postgres.schema import (
    DEAD_LETTERS,
    HEADS,
    SHARD_COMMITS,
    TableName,
    regclass,
)
from exactlyonce.dedup.ids import record_id
from exactlyonce.errors import ConfigError
from exactlyonce.integration.cli import drop_catalog
from exactlyonce.integration.config import (
    FilesSourceConfig,
    PipelineConfig,
    PostgresSinkConfig,
    load_config,
)

DUPLICATE_RATE = 0.25
NULL_KEYS = 3
IDLE_SECONDS = 15
RUN_TIMEOUT_SECONDS = 300
FIELDS = ("event_id", "user_id", "action", "ts")
ACTIONS = ("view", "click", "cart", "buy", "share")

Record = dict[str, Any]


# ---------------------------------------------------------------------- the audit


@dataclass
class Audit:
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
    """What the sink's table, dead-letter table and head hold, against the expected IDs."""
    sink = cfg.build_sink(check=False)  # no connection: for its names only
    table = TableName.parse(_pg(cfg).table)
    with psycopg.connect(_pg(cfg).dsn.get_secret_value(), autocommit=True) as conn:
        ids: list[str] = []
        if regclass(conn, table) is not None:
            rows = conn.execute(
                sql.SQL("SELECT replace({}::text, '-', '') FROM {}").format(
                    sql.Identifier(_pg(cfg).id_column), table.ident()
                )
            ).fetchall()
            ids = [str(r[0]) for r in rows]
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


def print_audit(a: Audit) -> None:
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


# ---------------------------------------------------------------------- input data


def generate(rng: random.Random, files: int, rows_per_file: int) -> list[list[Record]]:
    """Records per file. A duplicate repeats a whole earlier record, from the same file or an
    earlier one; ``NULL_KEYS`` records with a null key are mixed in at random places."""
    start = datetime(2024, 1, 1, tzinfo=timezone.utc)
    earlier: list[Record] = []
    out: list[list[Record]] = []
    n = 0
    for _ in range(files):
        batch: list[Record] = []
        for _ in range(rows_per_file):
            pool = batch if batch and (not earlier or rng.random() < 0.5) else earlier
            if pool and rng.random() < DUPLICATE_RATE:
                batch.append(dict(rng.choice(pool)))
            else:
                batch.append(_record(f"evt-{n:07d}", rng, start + timedelta(seconds=n)))
                n += 1
        out.append(batch)
        earlier.extend(_first_of_each(batch, earlier))
    for i in range(NULL_KEYS):
        target = out[rng.randrange(len(out))]
        target.insert(rng.randrange(len(target) + 1), _record(None, rng, start, salt=i))
    return out


def _first_of_each(batch: list[Record], earlier: list[Record]) -> list[Record]:
    known = {r["event_id"] for r in earlier}
    fresh = []
    for r in batch:
        if r["event_id"] not in known:
            known.add(r["event_id"])
            fresh.append(r)
    return fresh


def _record(event_id: str | None, rng: random.Random, ts: datetime, salt: int = 0) -> Record:
    return {
        "event_id": event_id,
        "user_id": rng.randrange(1, 5000) + salt,
        "action": rng.choice(ACTIONS),
        "ts": ts.strftime("%Y-%m-%dT%H:%M:%SZ"),
    }


def write_files(input_dir: Path, files: list[list[Record]]) -> None:
    """Each file is written beside the directory, then renamed in: Spark never sees half."""
    staging = input_dir.with_name(input_dir.name + ".staging")
    staging.mkdir(parents=True, exist_ok=True)
    input_dir.mkdir(parents=True, exist_ok=True)
    for i, records in enumerate(files):
        name = f"part-{i:05d}.json"
        tmp = staging / name
        tmp.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
        os.rename(tmp, input_dir / name)
    staging.rmdir()


# ---------------------------------------------------------------------- fresh state


def reset_state(cfg: PipelineConfig, source: FilesSourceConfig) -> None:
    """No checkpoint, input, table, dedup catalog, head, shard commits or dead letters."""
    shutil.rmtree(cfg.checkpoint, ignore_errors=True)
    shutil.rmtree(source.path, ignore_errors=True)
    drop_catalog(cfg.build_sink(check=False))  # before the head, as `reset-head` does
    table = TableName.parse(_pg(cfg).table)
    with psycopg.connect(_pg(cfg).dsn.get_secret_value(), autocommit=True) as conn:
        conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(table.ident()))
        for name in (HEADS, SHARD_COMMITS, DEAD_LETTERS):
            if regclass(conn, TableName(table.schema, name)) is not None:
                conn.execute(
                    sql.SQL("DELETE FROM {} WHERE query_name = %s").format(table.sibling(name)),
                    [cfg.query_name],
                )


def head_epoch(cfg: PipelineConfig) -> int:
    """The query's committed head in PostgreSQL, -1 before the first commit."""
    table = TableName.parse(_pg(cfg).table)
    with psycopg.connect(_pg(cfg).dsn.get_secret_value(), autocommit=True) as conn:
        if regclass(conn, TableName(table.schema, HEADS)) is None:
            return -1
        row = conn.execute(
            sql.SQL("SELECT max(epoch) FROM {} WHERE query_name = %s").format(table.sibling(HEADS)),
            [cfg.query_name],
        ).fetchone()
    return -1 if row is None or row[0] is None else int(row[0])


# ---------------------------------------------------------------------- runs and kills


def start_run(config: str, log_path: Path, label: str) -> subprocess.Popen[str]:
    """``exactlyonce run`` in a new session; its progress lines are echoed, stderr logged."""
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}
    cmd = [
        sys.executable,
        "-m",
        "exactlyonce.integration.cli",
        "run",
        config,
        "--until-idle",
        str(IDLE_SECONDS),
    ]
    with open(log_path, "w", encoding="utf-8") as log:
        proc = subprocess.Popen(
            cmd,
            stdout=subprocess.PIPE,
            stderr=log,
            text=True,
            env=env,
            start_new_session=True,
        )
    threading.Thread(target=_echo, args=(proc, label), daemon=True).start()
    return proc


_DEDUP_LINE = re.compile(
    r"\| dedup: (\d+) checked, (\d+) bloom negatives, (\d+) catalog lookups, "
    r"(\d+) catalog duplicates, (\d+) false positives"
)
DEDUP_FIELDS = (
    "checked",
    "bloom negatives",
    "catalog lookups",
    "catalog duplicates",
    "false positives",
)
# Dedup counters summed over every batch of every run (killed runs included).
DEDUP_TOTALS = dict.fromkeys(DEDUP_FIELDS, 0)


def _echo(proc: subprocess.Popen[str], label: str) -> None:
    assert proc.stdout is not None
    for line in proc.stdout:
        text, _, _ = line.rstrip().partition(" | dedup:")
        print(f"  [{label}] {text}", flush=True)
        found = _DEDUP_LINE.search(line)
        if found:
            for name, value in zip(DEDUP_FIELDS, found.groups(), strict=True):
                DEDUP_TOTALS[name] += int(value)


def print_dedup_totals() -> None:
    """The dedup layer's counters over the whole demo, and the observed false-positive rate."""
    t = DEDUP_TOTALS
    new = t["bloom negatives"] + t["false positives"]
    print("DEDUP (Bloom filter + Redis catalog, all batches of all runs)")
    for name in DEDUP_FIELDS:
        print(f"  {'IDs ' + name if name == 'checked' else name:<22}{t[name]:>10}")
    rate = t["false positives"] / new if new else 0.0
    print(f"  {'observed fp rate':<22}{rate:>10.4%}")


def wait_for_new_epoch(
    cfg: PipelineConfig, proc: subprocess.Popen[str], after: int, timeout: float
) -> int | None:
    """The head once it passes ``after``; None if the run ended or timed out first."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None:
        epoch = head_epoch(cfg)
        if epoch > after:
            return epoch
        time.sleep(0.2)
    return None


def kill_group(proc: subprocess.Popen[str]) -> None:
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def run_with_kills(
    cfg: PipelineConfig, config: str, kills: int, rng: random.Random, log_dir: Path
) -> int:
    """Run, SIGKILL after each new epoch ``kills`` times, then run until idle; kills done."""
    for attempt in range(1, kills + 1):
        proc = start_run(config, log_dir / f"run-{attempt}.log", f"run {attempt}")
        # 1-3 epochs: after the first, a warm JVM's batches are short, so the 0-2 s delay
        # lands anywhere from before the write, through the COPY, to after Spark's commit.
        after = head_epoch(cfg) + rng.randint(0, 2)
        epoch = wait_for_new_epoch(cfg, proc, after, RUN_TIMEOUT_SECONDS)
        if epoch is None:
            _fail_run(proc, log_dir / f"run-{attempt}.log", "ended before committing an epoch")
        time.sleep(rng.uniform(0.0, 2.0))
        at = head_epoch(cfg)
        kill_group(proc)
        print(f"kill {attempt}/{kills} at epoch {at} (pid {proc.pid})", flush=True)
    last = kills + 1
    proc = start_run(config, log_dir / f"run-{last}.log", f"run {last}")
    try:
        code = proc.wait(timeout=RUN_TIMEOUT_SECONDS)
    except subprocess.TimeoutExpired:
        _fail_run(proc, log_dir / f"run-{last}.log", "did not finish in time")
    if code != 0:
        _fail_run(proc, log_dir / f"run-{last}.log", f"exited with {code}")
    return kills


def _fail_run(proc: subprocess.Popen[str], log_path: Path, why: str) -> None:
    if proc.poll() is None:
        kill_group(proc)
    tail = log_path.read_text(encoding="utf-8", errors="replace").splitlines()[-15:]
    raise SystemExit(f"demo run {why}; last lines of {log_path}:\n" + "\n".join(tail))


# ---------------------------------------------------------------------- main


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(1 << 31)
    print(f"seed {seed} (replay with --seed {seed})", flush=True)
    began = time.monotonic()
    from exactlyonce.integration.services import service_env

    os.environ.update(service_env())
    try:
        cfg = load_config(args.config)
        source = _demo_source(cfg)
    except ConfigError as exc:
        print(f"config error: {exc}", file=sys.stderr)
        return 2

    reset_state(cfg, source)
    files = generate(random.Random(seed), args.files, args.rows_per_file)
    write_files(Path(source.path), files)
    records = [r for batch in files for r in batch]
    keys = [r["event_id"] for r in records]
    expected = {record_id([k]) for k in keys if k is not None}
    nulls = keys.count(None)
    print(
        f"input: {len(files)} files, {len(records)} records, {len(expected)} distinct IDs, "
        f"{len(records) - nulls - len(expected)} duplicates, {nulls} null keys",
        flush=True,
    )

    log_dir = Path(cfg.checkpoint).parent / "logs"
    log_dir.mkdir(parents=True, exist_ok=True)
    kills = run_with_kills(cfg, args.config, args.kills, random.Random(seed + 1), log_dir)

    audit = read_audit(
        cfg, expected, expected_dead_letters=nulls, input_records=len(records), kills=kills
    )
    print_dedup_totals()
    print_audit(audit)
    print(f"seed {seed}, {time.monotonic() - began:.0f} s, logs in {log_dir}")
    return 0 if audit.ok else 1


def _pg(cfg: PipelineConfig) -> PostgresSinkConfig:
    """The demo writes to, and audits, PostgreSQL."""
    if not isinstance(cfg.sink, PostgresSinkConfig):
        raise ConfigError("sink.type", "the demo audits a PostgreSQL table: use type postgres")
    return cfg.sink


def _demo_source(cfg: PipelineConfig) -> FilesSourceConfig:
    _pg(cfg)
    source = cfg.source
    if not isinstance(source, FilesSourceConfig) or source.format != "json":
        raise ConfigError("source.type", "the demo generates JSON files: use type files, json")
    missing = [f for f in FIELDS if f not in source.columns()]
    if missing:
        raise ConfigError("source.schema", f"the demo's records need column(s) {missing}")
    if tuple(cfg.sink.id_columns) != ("event_id",):
        raise ConfigError("sink.id_columns", "the demo's records are keyed by [event_id]")
    return source


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m exactlyonce.integration.demo",
        description=__doc__.splitlines()[0] if __doc__ else None,
    )
    p.add_argument("--config", default="examples/pipeline.yaml")
    p.add_argument("--files", type=int, default=24)
    p.add_argument("--rows-per-file", type=int, default=500)
    p.add_argument("--kills", type=int, default=3)
    p.add_argument("--seed", type=int)
    return p


if __name__ == "__main__":
    sys.exit(main())
