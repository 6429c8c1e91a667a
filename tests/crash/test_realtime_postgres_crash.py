"""Spark Real-time Mode into PostgreSQL, SIGKILLed: exactly once by source frontiers.

The job (tests/crash/realtime_job.py: Kafka, 2 partitions -> ``trigger(realTime="5
seconds")`` -> ``PostgresSink.realtime()``, fed by ``mapInArrow`` in the random-kill test and
by ``foreach`` in the others) runs as a separate process while a
producer sends events; its whole session (driver, JVM, Python workers) is SIGKILLed several
times, each run restarted from its checkpoint, then run until every event is in. Kills are
aimed: a run is killed at a seeded random moment shortly after its rows became visible (the
table's count grew), so they land inside an epoch Spark has not committed, whose rows Spark
then reads again. The audit reads the table with psycopg: every event exactly once.

Negative control: the same schedule against a plain foreach writer that INSERTs each row
with no frontier must show duplicates. And: the checkpoint deleted mid-stream, the query
restarted from the earliest offsets: still exactly once (the frontier is per source offset,
not per epoch, so the reset cannot make it skip new records).
"""

from __future__ import annotations

import random
import shutil
import time
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql

from tests.crash.harness import crash_seed, wait_until
from tests.support.realtime import (
    EventProducer,
    RealtimeJob,
    create_plain_table,
    distinct_events,
    end_offsets,
    event_counts,
    frontiers,
    make_topic,
    wait_for_events,
)

pytestmark = pytest.mark.crash

EVENTS = 3_000
RATE = 100.0  # events per second: the stream outlives the kills
KILLS = 3


def table_value(pg: psycopg.Connection[Any], query: str, table: str) -> Any:
    """``query``'s one value over ``table`` (its ``{}``); None before the job created it."""
    try:
        row = pg.execute(sql.SQL(query).format(sql.Identifier(table))).fetchone()
    except psycopg.errors.UndefinedTable:
        return None
    return row[0] if row else None


def table_rows(pg: psycopg.Connection[Any], table: str) -> int:
    return int(table_value(pg, "SELECT count(*) FROM {}", table) or 0)


def newest_epoch(pg: psycopg.Connection[Any], table: str) -> int:
    """The highest epoch a row carries; -1 before any row."""
    newest = table_value(pg, "SELECT max(epoch) FROM {}", table)
    return -1 if newest is None else int(newest)


def newest_epoch_is_open(job: RealtimeJob, pg: psycopg.Connection[Any]) -> bool:
    """Rows of an epoch show whose end Spark has not logged (no ``offsets/<epoch>`` yet: it
    writes that at the epoch's end, then ``commits/<epoch>``), so a restart reads them again."""
    epoch = newest_epoch(pg, job.table)
    return epoch >= 0 and not (job.checkpoint / "offsets" / str(epoch)).exists()


def kill_after_visible_rows(
    job: RealtimeJob, pg: psycopg.Connection[Any], rng: random.Random, why: str
) -> None:
    """Start a run; once rows it wrote are visible, SIGKILL it within 1.5 s, and inside an
    epoch whose rows show and whose end Spark has not logged: on a busy machine a run's first
    epoch can spend most of its 5 s starting, and a kill 1.5 s after its first rows would
    land after the epoch's end, with nothing to read again (the negative control then saw no
    duplicate). The producer runs through the whole schedule, so a later epoch has rows."""
    before = table_rows(pg, job.table)
    job.start()
    job._wait(lambda: table_rows(pg, job.table) > before, 120, "rows of this run")
    time.sleep(rng.uniform(0.0, 1.5))
    job._wait(lambda: newest_epoch_is_open(job, pg), 60, "rows of an epoch not yet ended")
    assert job.proc is not None and job.proc.poll() is None, f"run {job.runs} ended before {why}"
    job.kill(why)


def killed_runs(
    job: RealtimeJob, pg: psycopg.Connection[Any], bootstrap: str, seed: int
) -> EventProducer:
    """The kill schedule, then a last run until every event is in; returns the producer."""
    rng = random.Random(seed)
    # The stream outlives the kills: it ends once they are done (at least EVENTS events).
    producer = EventProducer(bootstrap, job.topic, 100 * EVENTS, RATE).start()
    for n in range(KILLS):
        kill_after_visible_rows(job, pg, rng, f"kill {n + 1} (seed {seed})")
    wait_until(lambda: len(producer.sent) >= EVENTS, f"{EVENTS} events sent", 120)
    producer.finish()
    job.start()
    job.wait_started()
    wait_for_events(pg, job.table, producer.events, timeout=120)
    time.sleep(1.0)  # let a late duplicate of the negative control land
    job.stop()
    return producer


def test_realtime_writer_killed_three_times_writes_each_event_once(
    pg_dsn: str, pg: psycopg.Connection[Any], bootstrap: str, unique_name: str, tmp_path: Path
) -> None:
    seed = crash_seed("real-time mode kill schedule")
    make_topic(bootstrap, unique_name)
    # mapInArrow feeds the writer here (the default transport); foreach in the other tests
    job = RealtimeJob(tmp_path, unique_name, pg_dsn, topic=unique_name, transport="arrow")
    try:
        producer = killed_runs(job, pg, bootstrap, seed)
    finally:
        job.stop_if_running()
    assert len([k for k in job.kills if k.startswith("kill ")]) == KILLS
    counts = event_counts(pg, unique_name)
    assert sorted(producer.expected - set(counts)) == [], "events missing"
    assert {e: n for e, n in counts.items() if n != 1} == {}, "events written twice"
    assert set(counts) == producer.expected
    assert frontiers(pg, unique_name) == end_offsets(bootstrap, unique_name)


def test_negative_control_plain_foreach_insert_duplicates_under_the_same_kills(
    pg_dsn: str, pg: psycopg.Connection[Any], bootstrap: str, unique_name: str, tmp_path: Path
) -> None:
    seed = crash_seed("real-time mode negative control kill schedule")
    make_topic(bootstrap, unique_name)
    create_plain_table(pg, unique_name)
    job = RealtimeJob(tmp_path, unique_name, pg_dsn, topic=unique_name, writer="plain")
    try:
        producer = killed_runs(job, pg, bootstrap, seed)
    finally:
        job.stop_if_running()
    assert len([k for k in job.kills if k.startswith("kill ")]) == KILLS
    counts = event_counts(pg, unique_name)
    duplicates = sum(n - 1 for n in counts.values())
    print(f"negative control: {duplicates} duplicate rows over {len(counts)} events")
    assert set(counts) == producer.expected  # at-least-once: nothing missing
    assert duplicates > 0, "the audit cannot see duplicates: it proves nothing"


def test_a_deleted_checkpoint_restarted_from_earliest_stays_exactly_once(
    pg_dsn: str, pg: psycopg.Connection[Any], bootstrap: str, unique_name: str, tmp_path: Path
) -> None:
    """The first run writes rows in three epochs (0-2, or 1-2 when its first epoch passed
    starting its Python worker), so the second run's first epoch with rows, after the same
    start, has a number the first run used; the producer outlives both runs' starts."""
    make_topic(bootstrap, unique_name)
    job = RealtimeJob(tmp_path, unique_name, pg_dsn, topic=unique_name)
    producer = EventProducer(bootstrap, unique_name, 12_000, RATE).start()
    try:
        job.start()
        wait_until(lambda: newest_epoch(pg, unique_name) >= 2, "rows of epoch 2", 180)
        job.kill("before the checkpoint is deleted")
        first_run = epoch_of_each_event(pg, unique_name)
        shutil.rmtree(job.checkpoint)  # Spark restarts at the earliest offsets, epoch 0
        assert sum(frontiers(pg, unique_name).values()) == len(first_run)
        job.start()
        wait_until(
            lambda: distinct_events(pg, unique_name) > len(first_run), "the second run's rows", 180
        )
        producer.finish()
        wait_for_events(pg, unique_name, producer.events, timeout=120)
        job.stop()
    finally:
        job.stop_if_running()
    counts = event_counts(pg, unique_name)
    assert set(counts) == producer.expected
    assert {e: n for e, n in counts.items() if n != 1} == {}, "re-read records written again"
    assert frontiers(pg, unique_name) == end_offsets(bootstrap, unique_name)
    # The new checkpoint numbered its epochs from 0 again: events first written by the second
    # run carry epoch numbers the first run had written too (a guard by epoch would have
    # skipped them). Not "epoch 0 itself": on a busy machine a run's first epoch can pass
    # starting its Python worker, with no row written in it.
    reused = {
        event
        for event, epoch in epoch_of_each_event(pg, unique_name).items()
        if event not in first_run and epoch <= max(first_run.values())
    }
    print(f"first run: epochs {sorted(set(first_run.values()))}; {len(reused)} events reused one")
    assert reused, "the second run wrote nothing under an epoch number the first run used"


def epoch_of_each_event(pg: psycopg.Connection[Any], table: str) -> dict[str, int]:
    rows = pg.execute(
        sql.SQL("SELECT event_id, epoch FROM {}").format(sql.Identifier(table))
    ).fetchall()
    return {str(event): int(epoch) for event, epoch in rows}


def test_realtime_writer_killed_at_each_named_point_writes_each_event_once(
    pg_dsn: str, pg: psycopg.Connection[Any], bootstrap: str, unique_name: str, tmp_path: Path
) -> None:
    """Real-time Mode's named points (exactlyonce.faults), a run killed at each in turn:
    before a chunk's commit, after one, and at the epoch's end, each before Spark commits the
    epoch (tests/crash/test_realtime_sinks_crash.py does the same for the other sinks)."""
    points = [("rtm_before_chunk", 1), ("rtm_after_chunk", 2), ("rtm_epoch_end", 3)]
    make_topic(bootstrap, unique_name)
    job = RealtimeJob(tmp_path, unique_name, pg_dsn, topic=unique_name)
    producer = EventProducer(bootstrap, unique_name, 9_000, 50.0).start()
    try:
        job.kill_at_points(points)
        producer.finish()  # the stream outlived every kill
        job.start()
        job.wait_started()
        wait_for_events(pg, unique_name, producer.events, timeout=120)
        job.stop()
    finally:
        producer.done.set()
        job.stop_if_running()
    assert job.kills == [f"{point}@{epoch}" for point, epoch in points]
    counts = event_counts(pg, unique_name)
    assert set(counts) == producer.expected
    assert {e: n for e, n in counts.items() if n != 1} == {}, "events written twice"
    assert frontiers(pg, unique_name) == end_offsets(bootstrap, unique_name)
