"""The Kafka buffer and its drainer, against real Spark, the local Kafka-protocol broker and
real PostgreSQL.

Writes are counted, not rows: tests/support/audit.py's BEFORE INSERT trigger counts committed
insert ATTEMPTS (it fires before the unique index is checked, so a record the drainer wrote
twice shows up even though ``ON CONFLICT DO NOTHING`` hides the second copy), and its AFTER
INSERT trigger the rows inserted. Dead letters are read back with kafka-python.
"""

from __future__ import annotations

import json
import os
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from confluent_kafka import Producer
from psycopg import sql
from pyspark.sql import SparkSession

from exactlyonce.buffer import Buffered, Drainer, KafkaBuffer
from exactlyonce.connectors.base.frames import H_FRAME_INDEX
from exactlyonce.connectors.kafka.reader import (
    H_ATTEMPT,
    H_EPOCH,
    H_QUERY,
    H_RECORD_ID,
    H_RECORD_IDS,
    H_SHARD,
    confirmation_key,
)
from exactlyonce.connectors.postgres import PostgresSink
from exactlyonce.connectors.postgres.drain import OFFSETS, PgDrainTarget
from exactlyonce.dedup.ids import record_id
from exactlyonce.errors import ConfigError
from tests.support.audit import assert_exactly_once, install_audit, write_counts
from tests.support.events import events, ids
from tests.support.kafka_audit import named_headers, read_topic
from tests.support.private_postgres import PrivatePostgres

pytestmark = pytest.mark.integration


def prepared(
    pg: psycopg.Connection[Any], buffered: Buffered, spark: SparkSession, table: str
) -> None:
    """Create the target table from the stream's schema (what start_stream's preflight does)
    and put the audit triggers on it."""
    buffered.preflight(events(spark, 0, 1).schema)
    install_audit(pg, table)


def new_pipeline(
    pg_dsn: str,
    bootstrap: str,
    name: str,
    buffer_kw: dict[str, Any] | None = None,
    **sink_kw: Any,
) -> tuple[PostgresSink, KafkaBuffer, Buffered]:
    target = PostgresSink(pg_dsn, name, ["event_id"], name, **sink_kw)
    buffer = KafkaBuffer(topic=name, bootstrap_servers=bootstrap, partitions=2, **buffer_kw or {})
    return target, buffer, Buffered(target, buffer)


def buffer_layout(bootstrap: str, topic: str) -> list[tuple[int, int, bool]]:
    """(records, value bytes, is a frame) of every message of the buffer topic, read with
    kafka-python (aborted attempts included: this is the layout, not the recipe)."""
    out = []
    for msg in read_topic(bootstrap, topic, "read_uncommitted"):
        headers = named_headers(msg.headers)
        if H_RECORD_IDS in headers:
            ids_blob = headers[H_RECORD_IDS]
            assert len(ids_blob) % 32 == 0 and len(ids_blob) > 0
            records = len(ids_blob) // 32
            assert msg.value.count(b"\n") + 1 == records, "one line per record ID"
            out.append((records, len(msg.value), True))
        else:
            assert H_RECORD_ID in headers
            out.append((1, len(msg.value), False))
    return out


def stored_offsets(conn: psycopg.Connection[Any], query: str) -> dict[int, int]:
    rows = conn.execute(
        sql.SQL("SELECT partition, next_offset FROM {} WHERE query_name = %s").format(
            sql.Identifier(OFFSETS)
        ),
        [query],
    ).fetchall()
    return {int(p): int(o) for p, o in rows}


# ---------------------------------------------------------------------- the happy path


LAYOUTS = {
    "frames": {},  # the default: up to 1,000 records (256 KiB of values) a message
    "small-frames": {"frame_records": 7, "frame_bytes": 300},
    "one-record-a-message": {"frame_records": 1},
}


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_batches_reach_the_buffer_only_and_the_drainer_moves_them_once(
    spark: SparkSession,
    bootstrap: str,
    pg_dsn: str,
    pg: psycopg.Connection[Any],
    unique_name: str,
    layout: str,
) -> None:
    target, buffer, buffered = new_pipeline(pg_dsn, bootstrap, unique_name, LAYOUTS[layout])
    prepared(pg, buffered, spark, unique_name)
    first = events(spark, 0, 400)
    buffered(first.union(first.limit(50)), 0)  # 50 repeats inside the batch
    buffered(events(spark, 300, 700), 1)  # 100 IDs seen in epoch 0
    buffered(first, 0)  # Spark re-runs a batch: at or below the head, skipped
    assert [r.skipped for r in buffered.reports] == [False, False, True]
    messages = buffer_layout(bootstrap, buffer.topic)
    assert sum(n for n, _, _ in messages) == 700, "each record once in the buffer"
    if layout == "one-record-a-message":
        assert all(not frame for _, _, frame in messages)
    else:
        assert all(frame for _, _, frame in messages)
        assert max(n for n, _, _ in messages) <= buffer.frame_records
        assert all(size <= buffer.frame_bytes for n, size, _ in messages if n > 1)
        assert len(messages) < 700 / 2, "records travel several to a message"
    # The Spark batch wrote to Kafka only: nothing is in PostgreSQL before the drain.
    assert pg.execute(
        sql.SQL("SELECT count(*) FROM {}").format(sql.Identifier(unique_name))
    ).fetchone() == (0,)

    with Drainer(target, buffer, batch_size=300) as drainer:
        report = drainer.drain_available(timeout_s=60)
    assert report.written == 700 and report.dead_letters == 0
    assert report.batches >= 3, "batch_size bounds each write transaction"
    assert drainer.lag.records == 0 and drainer.lag.seconds == 0.0
    assert_exactly_once(pg, unique_name, ids(0, 700))
    assert set(write_counts(pg, unique_name).values()) == {1}, "a record was written twice"
    epochs = dict(
        pg.execute(
            sql.SQL("SELECT epoch, count(*) FROM {} GROUP BY epoch").format(
                sql.Identifier(unique_name)
            )
        ).fetchall()
    )
    assert epochs == {0: 400, 1: 300}, "each row keeps the epoch of its Spark batch"

    # The consumed offsets live in the sink, next to the data: a new drainer resumes there.
    offsets = stored_offsets(pg, unique_name)
    frontier = drainer.commits.frontier(buffer.topic)
    # A partition no frame went to may be at 0 on one side and absent from the other.
    assert {p: o for p, o in offsets.items() if o} == {p: o for p, o in frontier.items() if o}, (
        "drained up to the frontier"
    )
    buffered(events(spark, 700, 750), 2)
    again = Drainer(target, buffer)
    try:
        assert again.load_offsets() == offsets, "restart reads the offsets back from PostgreSQL"
        report = again.drain_available(timeout_s=60)
    finally:
        again.close()
    assert report.written == 50
    assert_exactly_once(pg, unique_name, ids(0, 750))
    assert set(write_counts(pg, unique_name).values()) == {1}


def test_drainer_as_a_thread_reports_lag_and_stops(
    spark: SparkSession, bootstrap: str, pg_dsn: str, pg: psycopg.Connection[Any], unique_name: str
) -> None:
    target, buffer, buffered = new_pipeline(pg_dsn, bootstrap, unique_name, dedup=False)
    prepared(pg, buffered, spark, unique_name)
    buffered(events(spark, 0, 200), 0)
    drainer = Drainer(target, buffer, poll_interval_s=0.1)
    drainer.refresh_lag()
    assert drainer.lag.records >= 200, "200 committed records not drained yet"
    assert drainer.lag.seconds >= 0.0
    drainer.start()
    try:
        deadline = time.monotonic() + 60
        while drainer.total.written < 200:
            assert time.monotonic() < deadline, f"drainer thread stuck: {drainer.total}"
            assert drainer.error is None, drainer.error
            time.sleep(0.1)
        buffered(events(spark, 200, 260), 1)
        while drainer.total.written < 260:
            assert time.monotonic() < deadline, f"drainer thread stuck: {drainer.total}"
            time.sleep(0.1)
    finally:
        drainer.stop()
    assert not drainer.running
    assert drainer.lag.records == 0
    assert_exactly_once(pg, unique_name, ids(0, 260))


# ---------------------------------------------------------------------- bad messages


def inject(
    bootstrap: str,
    buffered: Buffered,
    epoch: int,
    messages: list[tuple[bytes, str | None]],
    query: str | None = None,
    frames: list[tuple[bytes, bytes]] | None = None,
) -> None:
    """Write ``(value, record_id)`` messages into the buffer topic as one CONFIRMED attempt
    of shard 99 (no real shard has that number), the way a buggy writer that follows the
    protocol could: the recipe accepts them, so only the drainer's checks stand between
    them and the sink."""
    attempt = uuid.uuid4().hex[:16]
    query = query or buffered.query_name
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for value, rid in messages:
        headers = [
            (H_QUERY, query.encode()),
            (H_EPOCH, str(epoch).encode()),
            (H_SHARD, b"99"),
            (H_ATTEMPT, attempt.encode()),
        ]
        if rid is not None:
            headers.append((H_RECORD_ID, rid.encode()))
        producer.produce(buffered.topic, value, headers=headers)
    for value, ids_blob in frames or []:  # (lines, the IDs header) as a writer could get wrong
        headers = [
            (H_QUERY, query.encode()),
            (H_EPOCH, str(epoch).encode()),
            (H_SHARD, b"99"),
            (H_ATTEMPT, attempt.encode()),
            (H_RECORD_IDS, ids_blob),
        ]
        producer.produce(buffered.topic, value, headers=headers)
    producer.produce(
        buffered.control_topic,
        key=confirmation_key(query, buffered.sink_name, epoch, 99, attempt),
        value=json.dumps({"attempt": attempt, "count": len(messages)}),
        partition=buffered._control_partition,
    )
    assert producer.flush(30) == 0


def test_bad_messages_go_to_the_dead_letter_topic_and_the_drain_goes_on(
    spark: SparkSession, bootstrap: str, pg_dsn: str, pg: psycopg.Connection[Any], unique_name: str
) -> None:
    target, buffer, buffered = new_pipeline(pg_dsn, bootstrap, unique_name)
    prepared(pg, buffered, spark, unique_name)
    buffered(events(spark, 0, 100), 0)
    good = record_id(["x-good"])
    inject(
        bootstrap,
        buffered,
        1,
        [
            (b"\xff\xfe\x00 not json", record_id(["x1"])),
            (b'{"event_id": "x2", "amount": 2, "action": "a"}', None),
            (b'{"event_id": "x3", "amount": "lots", "action": "a"}', record_id(["x3"])),
            (b"[1, 2]", record_id(["x4"])),
            (b'{"event_id": "x5", "amount": 5, "action": ', record_id(["x5"])),
            (b'{"event_id": "x-good", "amount": 6, "action": "a"}', good),
        ],
    )
    # Another query's record in the same topic is not ours: skipped, not a dead letter.
    inject(bootstrap, buffered, 1, [(b"{}", record_id(["other"]))], query="someone-else")
    buffered(events(spark, 100, 200), 1)  # its head's frontier covers the injected records

    with Drainer(target, buffer, batch_size=64) as drainer:
        report = drainer.drain_available(timeout_s=60)
    assert report.dead_letters == 5
    assert report.written == 201
    assert_exactly_once(pg, unique_name, ids(0, 200) | {good})

    letters = read_topic(bootstrap, buffer.drain_dead_letter_topic, "read_uncommitted")
    reasons: dict[bytes, str] = {}
    for msg in letters:
        headers = named_headers(msg.headers)
        reasons[msg.value] = headers["eo-error"].decode()
        assert headers["eo-source-topic"].decode() == buffer.topic
        assert int(headers["eo-source-offset"]) >= 0
        assert headers[H_QUERY].decode() == unique_name, "the original headers are kept"
    assert len(letters) == 5, [r for r in reasons.values()]
    assert "record-ID header" in reasons[b'{"event_id": "x2", "amount": 2, "action": "a"}']
    assert "not valid UTF-8" in reasons[b"\xff\xfe\x00 not json"]
    assert "not a JSON object" in reasons[b"[1, 2]"]
    assert "22P02" in reasons[b'{"event_id": "x3", "amount": "lots", "action": "a"}']
    assert "json" in reasons[b'{"event_id": "x5", "amount": 5, "action": '].lower()


def test_frames_go_round_robin_over_the_partitions(
    spark: SparkSession, bootstrap: str, pg_dsn: str, pg: psycopg.Connection[Any], unique_name: str
) -> None:
    """A keyless message's partition is the client's sticky choice, which puts a task's frames
    in one partition; the drainer's writers and processes each own some partitions, so
    frames go round-robin: one shard's 100 frames, 50 in each of the 2 partitions."""
    from collections import Counter

    target, buffer, buffered = new_pipeline(
        pg_dsn, bootstrap, unique_name, {"frame_records": 7, "shards": 1}
    )
    prepared(pg, buffered, spark, unique_name)
    buffered(events(spark, 0, 700), 0)
    frames = Counter(
        m.partition
        for m in read_topic(bootstrap, buffer.topic, "read_uncommitted")
        if H_RECORD_IDS in named_headers(m.headers)
    )
    assert sum(frames.values()) == 100 and frames == {0: 50, 1: 50}, frames


def test_a_bad_record_of_a_frame_is_a_dead_letter_of_its_own(
    spark: SparkSession, bootstrap: str, pg_dsn: str, pg: psycopg.Connection[Any], unique_name: str
) -> None:
    """A frame is split only on the exact path: its good records are written, each bad one
    goes to the dead-letter topic alone, with its own ID and its place in the frame. A frame
    whose IDs and lines do not pair up is a dead letter whole: no line can be trusted."""
    target, buffer, buffered = new_pipeline(pg_dsn, bootstrap, unique_name)
    prepared(pg, buffered, spark, unique_name)
    buffered(events(spark, 0, 50), 0)
    good = [record_id([f"f-good{i}"]) for i in range(3)]
    bad_type, bad_utf8 = record_id(["f-bad-type"]), record_id(["f-bad-utf8"])
    lines = [
        b'{"event_id": "f-good0", "amount": 1, "action": "a"}',
        b'{"event_id": "f-bad-type", "amount": "lots", "action": "a"}',
        b'{"event_id": "f-good1", "amount": 2, "action": "a"}',
        b"\xff\xfe not utf-8",
        b'{"event_id": "f-good2", "amount": 3, "action": "a"}',
    ]
    frame_ids = [good[0], bad_type, good[1], bad_utf8, good[2]]
    mispaired = b'{"event_id": "f-x", "amount": 1, "action": "a"}'
    inject(
        bootstrap,
        buffered,
        1,
        [],
        frames=[
            (b"\n".join(lines), "".join(frame_ids).encode()),
            (mispaired + b"\n" + mispaired, record_id(["f-x"]).encode()),  # 2 lines, 1 ID
            (mispaired, b"not hex" * 32),
        ],
    )
    buffered(events(spark, 50, 100), 1)  # its head's frontier covers the injected frames

    with Drainer(target, buffer, batch_size=64) as drainer:
        report = drainer.drain_available(timeout_s=60)
    assert (report.written, report.dead_letters) == (103, 4)
    assert_exactly_once(pg, unique_name, ids(0, 100) | set(good))

    letters = {}
    for msg in read_topic(bootstrap, buffer.drain_dead_letter_topic, "read_uncommitted"):
        headers = named_headers(msg.headers)
        letters[headers.get(H_RECORD_ID, headers["eo-source-offset"])] = (msg, headers)
    assert len(letters) == 4, list(letters)
    msg, headers = letters[bad_type.encode()]
    assert msg.value == lines[1], "the record's own line, not the frame"
    assert headers[H_FRAME_INDEX] == b"1" and "22P02" in headers["eo-error"].decode()
    assert H_RECORD_IDS not in headers, "a record's dead letter names its own ID only"
    msg, headers = letters[bad_utf8.encode()]
    assert headers[H_FRAME_INDEX] == b"3" and "UTF-8" in headers["eo-error"].decode()
    reasons = sorted(h["eo-error"].decode() for m, h in letters.values() if H_RECORD_ID not in h)
    assert "1 record IDs" in reasons[0] and "2 lines" in reasons[0], reasons
    assert "malformed record-IDs header" in reasons[1], reasons


def test_a_record_too_large_for_the_buffer_is_a_dead_letter_and_frames_fit_the_topic(
    spark: SparkSession, bootstrap: str, pg_dsn: str, pg: psycopg.Connection[Any], unique_name: str
) -> None:
    """Frames stay within half the topic's max.message.bytes; a record that cannot be a
    message even alone goes to the buffer's dead-letter topic (the KafkaSink's), not into a
    refused frame that would fail the batch."""
    from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]
    from pyspark.sql import functions as F

    admin = AdminClient({"bootstrap.servers": bootstrap})
    topic = NewTopic(unique_name, 2, -1, config={"max.message.bytes": "2000"})
    admin.create_topics([topic])[unique_name].result()
    target, buffer, buffered = new_pipeline(pg_dsn, bootstrap, unique_name)
    assert buffered.max_message_bytes == 2000
    prepared(pg, buffered, spark, unique_name)
    df = events(spark, 0, 300).select(
        "event_id",
        "amount",
        F.when(F.col("amount") == 150, F.lit("x" * 5000))
        .otherwise(F.col("action"))
        .alias("action"),
    )
    buffered(df, 0)
    report = buffered.last_report
    assert report is not None and (report.written, report.dead_letters) == (299, 1)
    layout = buffer_layout(bootstrap, buffer.topic)
    assert sum(n for n, _, _ in layout) == 299 and max(n for n, _, _ in layout) > 1
    assert all(size + 1 + 32 * n <= 1000 for n, size, _ in layout), "half of max.message.bytes"

    with Drainer(target, buffer) as drainer:
        drained = drainer.drain_available(timeout_s=60)
    assert drained.written == 299
    assert_exactly_once(pg, unique_name, ids(0, 300) - {record_id(["e15"])})


def test_a_lost_catalog_is_rebuilt_from_the_buffers_frames(
    spark: SparkSession,
    bootstrap: str,
    pg_dsn: str,
    pg: psycopg.Connection[Any],
    unique_name: str,
    services: dict[str, str],
) -> None:
    """The buffer dedups with the Redis catalog like any KafkaSink; a lost catalog is rebuilt
    from the record IDs of the frames of confirmed attempts."""
    import redis

    from exactlyonce.dedup.catalog import namespace

    target, buffer, buffered = new_pipeline(pg_dsn, bootstrap, unique_name)
    prepared(pg, buffered, spark, unique_name)
    buffered(events(spark, 0, 200), 0)
    client = redis.Redis.from_url(services["EXACTLYONCE_REDIS_URL"])
    keys = list(client.scan_iter(match=namespace(unique_name, buffered.sink_name) + ":*"))
    assert keys
    client.delete(*keys)
    client.close()
    buffered(events(spark, 150, 300), 1)  # 50 IDs written in epoch 0
    report = buffered.last_report
    assert report is not None and report.catalog_rebuilds == 1
    assert (report.duplicates, report.written) == (50, 100)
    with Drainer(target, buffer) as drainer:
        drainer.drain_available(timeout_s=60)
    assert_exactly_once(pg, unique_name, ids(0, 300))
    assert set(write_counts(pg, unique_name).values()) == {1}, "the 50 repeats never left Spark"


# ---------------------------------------------------------------------- refusals


def test_offsets_past_the_end_of_the_topic_are_refused_not_skipped(
    spark: SparkSession, bootstrap: str, pg_dsn: str, pg: psycopg.Connection[Any], unique_name: str
) -> None:
    """A buffer topic that was deleted and re-created (or a broker that lost its memory)
    restarts its offsets: stored offsets beyond its end must stop the drainer with an error
    naming the fix, never skip what the new topic holds."""
    target, buffer, buffered = new_pipeline(pg_dsn, bootstrap, unique_name, dedup=False)
    prepared(pg, buffered, spark, unique_name)
    buffered(events(spark, 0, 20), 0)
    PgDrainTarget(target, buffer.topic).ensure()
    pg.execute(
        sql.SQL(
            "INSERT INTO {} (query_name, sink, topic, partition, next_offset) "
            "VALUES (%s, %s, %s, 0, 1000000)"
        ).format(sql.Identifier(OFFSETS)),
        [unique_name, target.sink_name, buffer.topic],
    )
    with (
        Drainer(target, buffer) as drainer,
        pytest.raises(ConfigError, match="reset-offsets|re-created"),
    ):
        drainer.drain_available(timeout_s=30)
    assert_exactly_once(pg, unique_name, set())


# ---------------------------------------------------------------------- mode="append"


def unique_indexes(conn: psycopg.Connection[Any], table: str) -> int:
    row = conn.execute(
        "SELECT count(*) FROM pg_index WHERE indrelid = %s::regclass AND indisunique", [table]
    ).fetchone()
    assert row is not None
    return int(row[0])


def test_an_append_table_gets_each_record_once_and_refused_rows_are_dead_letters(
    spark: SparkSession,
    bootstrap: str,
    pg_dsn: str,
    pg: psycopg.Connection[Any],
    unique_name: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """mode="append": the table has no unique index, so nothing in it makes a second write a
    no-op. What keeps each record to ONE write: the buffer holds it once (the catalog drops
    the input's duplicates, the head skips a re-run batch) and the drainer stores its offsets
    in the rows' transaction, so it never reads a committed record again. A CHECK constraint
    refuses three rows: their chunks' COPY fails, the plain INSERT is bisected, the three go
    to the drain dead letters with the reason; the other chunks are COPYed."""
    target, buffer, buffered = new_pipeline(
        pg_dsn, bootstrap, unique_name, {"frame_records": 7}, mode="append"
    )
    prepared(pg, buffered, spark, unique_name)
    assert unique_indexes(pg, unique_name) == 0, "an append table: no unique index at all"
    refused = {37, 371, 555}
    pg.execute(
        sql.SQL("ALTER TABLE {} ADD CONSTRAINT not_these CHECK (amount NOT IN ({}))").format(
            sql.Identifier(unique_name), sql.SQL(", ").join(sql.Literal(10 * n) for n in refused)
        )
    )
    first = events(spark, 0, 400)
    buffered(first.union(first.limit(50)), 0)  # 50 repeats inside the batch
    buffered(events(spark, 300, 700), 1)  # 100 IDs seen in epoch 0
    buffered(first, 0)  # Spark re-runs a batch: at or below the head, skipped
    assert [r.written for r in buffered.reports] == [400, 300, 0]
    copies: list[bool] = []
    real_copy = PgDrainTarget.copy

    def counted_copy(self: PgDrainTarget, data: bytes) -> bool:
        copies.append(real_copy(self, data))
        return copies[-1]

    monkeypatch.setattr(PgDrainTarget, "copy", counted_copy)

    with Drainer(target, buffer, batch_size=100) as drainer:
        report = drainer.drain_available(timeout_s=60)
    assert (report.written, report.duplicates, report.dead_letters) == (697, 0, 3)
    assert report.batches >= 7, "batch_size bounds each write transaction"
    assert copies.count(False) >= 1, "a refused row's COPY fell back to the INSERT"
    assert copies.count(True) >= 4, "the other shares took the fast path"
    refused_ids = {record_id([f"e{n}"]) for n in refused}
    assert_exactly_once(pg, unique_name, ids(0, 700) - refused_ids)
    assert set(write_counts(pg, unique_name).values()) == {1}, "a record was written twice"
    letters = {}
    for msg in read_topic(bootstrap, buffer.drain_dead_letter_topic, "read_uncommitted"):
        headers = named_headers(msg.headers)
        letters[headers[H_RECORD_ID].decode()] = headers["eo-error"].decode()
    assert set(letters) == refused_ids
    assert all("23514" in why for why in letters.values()), letters  # check_violation

    # A restart resumes at the stored offsets: nothing is appended again, new records once.
    offsets = stored_offsets(pg, unique_name)
    buffered(events(spark, 700, 750), 2)
    with Drainer(target, buffer, batch_size=100) as again:
        assert again.load_offsets() == offsets
        assert again.drain_available(timeout_s=60).written == 50
    assert_exactly_once(pg, unique_name, ids(0, 750) - refused_ids)
    assert set(write_counts(pg, unique_name).values()) == {1}


def test_the_append_target_inserts_without_on_conflict_and_needs_no_unique_index(
    pg_dsn: str, pg: psycopg.Connection[Any], unique_name: str
) -> None:
    """The same table as an insert target is refused (no unique index to make a re-read
    record a no-op); as an append target it is drained with a plain INSERT and COPY."""
    pg.execute(
        sql.SQL("CREATE TABLE {} (event_id text, record_id uuid NOT NULL, epoch bigint)").format(
            sql.Identifier(unique_name)
        )
    )
    insert = PostgresSink(pg_dsn, unique_name, ["event_id"], unique_name, check=False)
    with pytest.raises(ConfigError, match="unique index"):
        PgDrainTarget(insert, unique_name).ensure()
    append = PostgresSink(
        pg_dsn, unique_name, ["event_id"], unique_name, mode="append", check=False
    )
    target = PgDrainTarget(append, unique_name)
    try:
        target.ensure()
        assert target._insert is not None and target._copy is not None
        assert "CONFLICT" not in target._insert.as_string(pg).upper()
        assert target._json_options is not None, "a fast path for this table"
    finally:
        target.close()


def test_resetting_an_append_tables_offsets_is_refused_naming_the_risk(
    spark: SparkSession,
    bootstrap: str,
    pg_dsn: str,
    pg: psycopg.Connection[Any],
    unique_name: str,
    tmp_path: Path,
) -> None:
    """Forgetting the offsets makes the drainer read the buffer from its start; into an
    append table that is every record a second time. Refused, from Python and from
    ``exactlyonce drain --reset-offsets --yes``, with the offsets left as they were."""
    from exactlyonce.integration import cli
    from tests.support.pipelines import buffered_pipeline

    target, buffer, buffered = new_pipeline(pg_dsn, bootstrap, unique_name, mode="append")
    prepared(pg, buffered, spark, unique_name)
    buffered(events(spark, 0, 100), 0)
    with Drainer(target, buffer) as drainer:
        assert drainer.drain_available(timeout_s=60).written == 100
        offsets = stored_offsets(pg, unique_name)
        with pytest.raises(ConfigError, match="second time") as refused:
            drainer.reset_offsets()
    assert refused.value.field == "reset_offsets"
    assert "exactlyonce_drain_offsets" in refused.value.reason, "names the way, by hand"
    assert stored_offsets(pg, unique_name) == offsets

    config = tmp_path / "pipeline.yaml"
    section = f"""\
  type: postgres
  dsn: ${{EXACTLYONCE_PG_DSN}}
  table: {unique_name}
  id_columns: [event_id]
  mode: append
"""
    config.write_text(
        buffered_pipeline(
            unique_name,
            tmp_path,
            schema="event_id STRING",
            partitions=2,
            batch_size=100,
            sink=section,
        )
    )
    assert cli.main(["drain", str(config), "--reset-offsets", "--yes"]) == 2
    assert stored_offsets(pg, unique_name) == offsets
    assert_exactly_once(pg, unique_name, ids(0, 100))


# ---------------------------------------------------------------------- sink outage


@pytest.fixture
def private_pg(tmp_path: Path) -> Iterator[tuple[str, Any, Any]]:
    """A PostgreSQL cluster of this test's own (tests/support/private_postgres.py), so stopping it
    cannot disturb anyone else using the shared one. Yields (dsn, stop, start)."""
    server = PrivatePostgres(tmp_path / "pg-home")
    server.start()
    try:
        yield server.dsn, server.stop, server.start
    finally:
        server.remove()


OUTAGE_S = 20.0


@pytest.mark.slow
def test_sink_outage_neither_fails_nor_stalls_the_query_and_loses_nothing(
    spark: SparkSession,
    bootstrap: str,
    private_pg: tuple[str, Any, Any],
    tmp_path: Path,
    unique_name: str,
) -> None:
    dsn, stop_pg, start_pg = private_pg
    target = PostgresSink(dsn, unique_name, ["event_id"], unique_name)  # catalog: shared Redis
    buffer = KafkaBuffer(topic=unique_name, bootstrap_servers=bootstrap, partitions=2, shards=2)
    buffered = Buffered(target, buffer)
    inbox = tmp_path / "input"
    inbox.mkdir()
    expected: set[str] = set()
    written = 0

    def add_file(rows: int = 40) -> None:
        nonlocal written
        lines = []
        for i in range(written, written + rows):
            key = f"e{i}" if i % 7 else f"e{i - 3}"  # every 7th row repeats an earlier ID
            lines.append(json.dumps({"event_id": key, "amount": i, "action": "click"}))
            expected.add(record_id([key]))
        written += rows
        tmp = tmp_path / f".{written}.tmp"
        tmp.write_text("\n".join(lines) + "\n")
        os.replace(tmp, inbox / f"part-{written:06d}.json")

    add_file()
    source = (
        spark.readStream.schema("event_id STRING, amount BIGINT, action STRING")
        .option("maxFilesPerTrigger", 2)
        .json(str(inbox))
    )
    from exactlyonce.integration.spark import start_stream

    query = start_stream(source, buffered, str(tmp_path / "checkpoint"), processing_time="1 second")
    with psycopg.connect(dsn, autocommit=True) as conn:
        install_audit(conn, unique_name)
    drainer = Drainer(target, buffer, poll_interval_s=0.2, max_backoff_s=2.0)
    drainer.start()
    stop_feeding = threading.Event()

    def feed() -> None:
        while not stop_feeding.wait(1.0):
            add_file()

    feeder = threading.Thread(target=feed, daemon=True)
    feeder.start()
    began = time.monotonic()
    try:
        deadline = time.monotonic() + 60
        while drainer.total.written < 80:  # the drainer is moving data before the outage
            assert time.monotonic() < deadline, f"no drain before the outage: {drainer.total}"
            assert drainer.error is None, drainer.error
            time.sleep(0.2)

        print(f"drained before the outage after {time.monotonic() - began:.1f}s")
        stop_pg()
        outage_began = time.monotonic()
        batches_before = len(buffered.reports)
        drained_before = drainer.total.written
        while time.monotonic() - outage_began < OUTAGE_S:
            assert query.exception() is None, query.exception()
            time.sleep(0.5)
        during = [r for r in buffered.reports[batches_before:] if not r.skipped]
        print(
            f"during the {OUTAGE_S:.0f}s outage: {len(during)} Spark batches committed to the "
            f"buffer (slowest {max((r.seconds for r in during), default=0):.2f}s), drainer "
            f"retries {drainer.total.retries}, lag {drainer.lag}"
        )
        assert len(during) >= 5, f"the query stalled during the outage: {len(during)} batches"
        assert max(r.seconds for r in during) < 10.0, "a batch waited for the sink"
        assert drainer.total.written == drained_before, "wrote while PostgreSQL was down?"
        assert drainer.total.retries >= 1, "the drainer did not notice the outage"
        assert drainer.lag.records > 0, "lag must show the records waiting for the sink"
        assert drainer.error is None, drainer.error
        assert drainer.running, "the drainer gave up during the outage"

        start_pg()
        stop_feeding.set()
        feeder.join()
        restarted = time.monotonic()
        deadline = time.monotonic() + 60
        while True:  # the query takes in every file, the drainer catches up
            progress = query.lastProgress
            caught_up = (
                progress is not None
                and progress["numInputRows"] == 0
                and drainer.lag.records == 0
                and drainer.total.written >= len(expected)
            )
            if caught_up:
                break
            assert time.monotonic() < deadline, f"did not catch up: {drainer.total} {drainer.lag}"
            assert query.exception() is None, query.exception()
            assert drainer.error is None, drainer.error
            time.sleep(0.5)
        print(f"caught up {time.monotonic() - restarted:.1f}s after PostgreSQL came back")
    finally:
        stop_feeding.set()
        query.stop()
        drainer.stop()
    assert query.exception() is None
    with psycopg.connect(dsn, autocommit=True) as conn:
        assert_exactly_once(conn, unique_name, expected)
        assert set(write_counts(conn, unique_name).values()) == {1}


# ---------------------------------------------------------------------- small parts


def test_documents_append_id_and_epoch_last(pg_dsn: str, unique_name: str) -> None:
    from exactlyonce.connectors.base.drain import DrainRow

    sink = PostgresSink(pg_dsn, unique_name, ["event_id"], unique_name, dedup=False, check=False)
    target = PgDrainTarget(sink, unique_name)
    rid = record_id(["k"]).encode()
    values = [b"{}", b'{ "a": 1 }\n', b'{"record_id": "forged", "epoch": 99, "b": [1]}']
    rows = [DrainRow(0, rid, 7, v, None) for v in values]
    parsed = json.loads(target.document(rows))
    assert parsed == [
        {"record_id": rid.decode(), "epoch": 7},
        {"a": 1, "record_id": rid.decode(), "epoch": 7},
        {"record_id": rid.decode(), "epoch": 7, "b": [1]},  # the header's ID wins
    ]
    last = target.document(rows[2:]).rstrip("]}")
    assert last.endswith(f'"record_id":"{rid.decode()}","epoch":7'), "ours come last"


def test_unreachable_sink_is_retried_and_never_shows_the_password(
    bootstrap: str, pg_dsn: str, unique_name: str, caplog: pytest.LogCaptureFixture
) -> None:
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    from exactlyonce.errors import SinkUnavailableError

    parts = conninfo_to_dict(pg_dsn)
    secret = "Wr0ng-s3cret-" + uuid.uuid4().hex[:6]
    bad_dsn = make_conninfo(**{**parts, "password": secret})
    sink = PostgresSink(bad_dsn, unique_name, ["event_id"], unique_name, dedup=False, check=False)
    buffer = KafkaBuffer(topic=unique_name, bootstrap_servers=bootstrap)
    caplog.set_level("DEBUG", logger="exactlyonce")
    with (
        Drainer(sink, buffer, max_backoff_s=0.3) as drainer,
        pytest.raises(SinkUnavailableError) as failure,
    ):
        drainer.drain_available(timeout_s=1.5)
    assert drainer.total.retries >= 2, "an unreachable sink is retried, not given up at once"
    assert secret not in str(failure.value)
    assert secret not in caplog.text
    assert "retry in" in caplog.text
