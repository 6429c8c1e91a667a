"""kill -9 a real PySpark aggregation in update mode, upserted into each sink; restart; audit.

The job (tests/crash/upsert_job.py) reads JSON event files with duplicate events (retries)
and replayed blocks, runs ``dropDuplicates(["event_id"])`` then ``groupBy("key").agg(count,
sum)`` in ``outputMode("update")``, and writes each epoch with ``mode="upsert"`` keyed by
``key`` into PostgreSQL, Redis and Elasticsearch in turn (one JVM start per run serves all
three sinks). One seeded schedule: five runs SIGKILLed at named points (``before_write``,
each sink's mid-write point, ``after_head``) at seeded epochs, one run SIGKILLed at a seeded
random moment (every scheduled kill is asserted to have happened), then a run to the end.

The audit:

- the sink holds EXACTLY the result of the same aggregation run as a plain Spark batch job
  over the deduplicated input (the job's last run computes it; a Python computation must
  agree): no extra key, none missing, every value equal, each key at the last epoch that
  changed it;
- writes are counted: per key, the epochs of its applied writes never go backwards, and they
  are exactly the epochs whose output held the key (a PostgreSQL audit trigger on INSERT and
  UPDATE; the Redis sink's AOF, every HSET/SET the apply script ran; the Elasticsearch test
  server's per-``_id`` write log).

Replay a failure with ``EXACTLYONCE_CRASH_SEED=<seed>`` (printed).
"""

from __future__ import annotations

import json
import os
import random
import time
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import psycopg
import pytest
from psycopg import sql

from exactlyonce.connectors import PostgresSink
from exactlyonce.dedup.ids import record_id
from tests.crash.harness import Job, crash_seed, epoch_of_each_file
from tests.support.es_fixtures import EsHandle
from tests.support.redis_fixtures import SinkRedis
from tests.support.upsert_audit import install_upsert_audit, upsert_attempts, upsert_writes

pytestmark = [pytest.mark.crash, pytest.mark.integration]

FILES = 9  # epochs 0-8: the named kills land in 1-6, the random one after
KEYS = 24
MID_WRITE = {"postgres": "mid_copy", "redis": "mid_write", "elasticsearch": "mid_bulk"}
SINKS = ["postgres", "redis", "elasticsearch"]
# Sinks whose shard writes and marker are one atomic step (a transaction, a Lua script): a
# re-run never applies a committed (key, epoch) again. Elasticsearch re-sends what a killed
# bulk left unmarked (the same epoch, applied again under external_gte).
ATOMIC_SHARDS = {"postgres", "redis"}


@dataclass
class Events:
    """The input, and what the aggregation of its deduplicated events must end as."""

    totals: dict[str, tuple[int, int]]  # key -> (count, sum)
    changed: list[set[str]]  # per file: the keys it brings a new event of

    def epochs(self, epoch_of_file: dict[int, int]) -> dict[str, list[int]]:
        """key -> the epochs whose output held it, given which epoch read each file."""
        out: dict[str, set[int]] = defaultdict(set)
        for n, keys in enumerate(self.changed):
            for key in keys:
                out[key].add(epoch_of_file[n])
        return {k: sorted(v) for k, v in out.items()}


def make_events(directory: Path, seed: int, files: int = FILES, rows: int = 45) -> Events:
    """JSON-lines files of events; about a quarter of the lines repeat an earlier event
    (a retry), and every third file ends with a replay of a block of an earlier file."""
    rng = random.Random(seed)
    directory.mkdir(parents=True)
    base = int(time.time()) - 3600
    sent: list[dict[str, Any]] = []
    seen: set[str] = set()
    totals: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    changed: list[set[str]] = []
    for n in range(files):
        lines = []
        for _ in range(rows):
            if sent and rng.random() < 0.25:
                lines.append(rng.choice(sent))
            else:
                event = {"event_id": f"e{len(sent)}", "key": f"k{rng.randrange(KEYS)}",
                         "amount": rng.randint(1, 100)}  # fmt: skip
                sent.append(event)
                lines.append(event)
        if n % 3 == 2:
            start = rng.randrange(len(sent) - 10)
            lines.extend(sent[start : start + 10])
        changed.append(set())
        for event in lines:
            if event["event_id"] in seen:
                continue
            seen.add(event["event_id"])
            totals[event["key"]][0] += 1
            totals[event["key"]][1] += event["amount"]
            changed[n].add(event["key"])
        tmp = directory.parent / f".{n:04d}.json.tmp"
        tmp.write_text("".join(json.dumps(e) + "\n" for e in lines))
        # Spark's file source orders files by modification time only: one second apart, the
        # files are read in order (files written in one clock tick could swap).
        os.utime(tmp, (base + n, base + n))
        tmp.rename(directory / f"part-{n:04d}.json")
    return Events({k: (v[0], v[1]) for k, v in totals.items()}, changed)


@dataclass
class UpsertJob(Job):
    """tests/crash/harness.py's Job, running upsert_job.py against one sink."""

    script: ClassVar[Path] = Path(__file__).with_name("upsert_job.py")
    sink: str = "all"
    redis_url: str = ""
    es_url: str = ""

    @property
    def expected_path(self) -> Path:
        return self.workdir / "expected.json"

    def sink_env(self) -> dict[str, str]:
        return {"EXACTLYONCE_PG_DSN": self.dsn, "EXACTLYONCE_SINK_REDIS_URL": self.redis_url}

    def sink_args(self) -> list[str]:
        args = ["--sink", self.sink, "--expected-out", str(self.expected_path)]
        return [*args, "--es-url", self.es_url] if self.es_url else args

    def batch_result(self) -> dict[str, tuple[int, int]]:
        raw = json.loads(self.expected_path.read_text())
        return {k: (int(v[0]), int(v[1])) for k, v in raw.items()}


# -- reading each sink back: key -> (n, total, epoch), and per key the epochs written --------


def postgres_state(
    pg: psycopg.Connection[Any], table: str
) -> tuple[dict[str, tuple[int, int, int]], dict[str, list[int]]]:
    rows = pg.execute(
        sql.SQL("SELECT key, n, total, epoch FROM {}").format(sql.Identifier(table))
    ).fetchall()
    state = {str(k): (int(n), int(t), int(e)) for k, n, t, e in rows}
    by_id = {record_id([k]): k for k in state}
    history: dict[str, list[int]] = defaultdict(list)
    for w in upsert_writes(pg, table):
        assert w.op in ("INSERT", "UPDATE") and w.new_epoch is not None, w
        history[by_id.get(w.record_id, w.record_id)].append(w.new_epoch)
    return state, dict(history)


def redis_state(
    server: SinkRedis, name: str
) -> tuple[dict[str, tuple[int, int, int]], dict[str, list[int]]]:
    r = server.client()
    state = {}
    for raw in r.scan_iter(match=f"{name}:*"):
        h = {k.decode(): v.decode() for k, v in r.hgetall(raw).items()}
        state[raw.decode().split(":", 1)[1]] = (int(h["n"]), int(h["total"]), int(h["epoch"]))
    history: dict[str, list[int]] = defaultdict(list)
    for cmd in server.aof_commands():
        if cmd[0].upper() == b"HSET" and cmd[1].startswith(f"{name}:".encode()):
            fields = dict(zip(cmd[2::2], cmd[3::2], strict=False))
            history[cmd[1].decode().split(":", 1)[1]].append(int(fields[b"epoch"]))
    return state, dict(history)


def es_state(
    handle: EsHandle, index: str
) -> tuple[dict[str, tuple[int, int, int]], dict[str, list[int]] | None]:
    state = {}
    for doc in handle.docs(index).values():
        state[doc["key"]] = (int(doc["n"]), int(doc["total"]), int(doc["epoch"]))
    if handle.server is None:
        return state, None  # a real cluster keeps no write log
    by_id = {record_id([k]): k for k in state}
    versions = handle.server.versions_written(index)
    return state, {by_id.get(i, i): v for i, v in versions.items()}


# -- the test ----------------------------------------------------------------------------


def schedule(rng: random.Random) -> list[tuple[str, int]]:
    """The named kills, each at its own seeded epoch among 1..6, in epoch order: inside each
    sink's write, after the first sink's head (before_write, the shared driver protocol before
    any write, is PostgreSQL's named-point test's and make soak's)."""
    points = [*MID_WRITE.values(), "after_head"]
    epochs = sorted(rng.sample(range(1, 7), len(points)))
    rng.shuffle(points)
    return list(zip(points, epochs, strict=True))


def sink_state(
    sink: str, name: str, pg: psycopg.Connection[Any], sink_redis: SinkRedis, es: EsHandle
) -> tuple[dict[str, tuple[int, int, int]], dict[str, list[int]] | None]:
    """The sink's rows (key -> (n, total, epoch)) and its write history (None: no log)."""
    if sink == "postgres":
        return postgres_state(pg, name)
    if sink == "redis":
        return redis_state(sink_redis, name)
    return es_state(es, name)


def test_an_upserted_aggregation_survives_kill_9(
    tmp_path: Path,
    pg_dsn: str,
    pg: psycopg.Connection[Any],
    sink_redis: SinkRedis,
    es: EsHandle,
    unique_name: str,
) -> None:
    """One job writes each epoch into PostgreSQL, Redis and Elasticsearch in turn (one JVM
    start per run serves all three); every sink must end exactly as the batch job says."""
    seed = crash_seed("upsert crash schedule")
    rng = random.Random(seed)
    events = make_events(tmp_path / "input", seed)
    names = {sink: f"{unique_name}_{sink}" for sink in SINKS}
    job = UpsertJob(tmp_path, unique_name, pg_dsn, redis_url=sink_redis.url, es_url=es.url)
    # the table and its audit trigger, before the first write
    from pyspark.sql.types import LongType, StringType, StructField, StructType

    schema = StructType([StructField("key", StringType()), StructField("n", LongType()),
                         StructField("total", LongType())])  # fmt: skip
    table = names["postgres"]
    PostgresSink(pg_dsn, table, ["key"], table, mode="upsert").preflight(schema)
    install_upsert_audit(pg, table)

    named = schedule(rng)
    print(f"named kills: {named}", flush=True)
    job.kill_at_points(named)
    job.kill_randomly(rng, seed, runs=1, max_delay=1.0, first=1)
    job.run_to_end()
    assert len(job.kills) == len(named) + 1, f"kills: {job.kills} (seed {seed})"

    batch = job.batch_result()
    assert batch == events.totals, "the Spark batch job and the Python count disagree"
    epochs = events.epochs(epoch_of_each_file(job.checkpoint))
    last = {k: e[-1] for k, e in epochs.items()}
    for sink, name in names.items():
        state, history = sink_state(sink, name, pg, sink_redis, es)
        assert {k: v[:2] for k, v in state.items()} == batch, f"{sink}: end state (seed {seed})"
        assert {k: v[2] for k, v in state.items()} == last, f"{sink}: a key's epoch (seed {seed})"
        if history is None:
            continue  # a real Elasticsearch cluster keeps no write log
        backwards = {k: e for k, e in history.items() if e != sorted(e)}
        assert not backwards, f"{sink}: writes went back: {list(backwards.items())[:3]}"
        assert {k: sorted(set(e)) for k, e in history.items()} == epochs, (
            f"{sink}: the epochs written differ from those whose output held each key (seed {seed})"
        )
        if sink in ATOMIC_SHARDS:  # a shard's writes commit with its marker: each (key, epoch)
            assert history == epochs, f"{sink}: a (key, epoch) applied twice (seed {seed})"
    # PostgreSQL: committed attempts per (key, epoch), those the epoch guard skipped included.
    by_id = {record_id([k]): k for k in epochs}
    attempts = {(by_id[i], e): n for (i, e), n in upsert_attempts(pg, table).items()}
    assert attempts == {(k, e): 1 for k, es in epochs.items() for e in es}, (
        f"postgres: (key, epoch) attempts differ from once per epoch holding it (seed {seed})"
    )
    assert job.last_commit() == max(epoch_of_each_file(job.checkpoint).values())
