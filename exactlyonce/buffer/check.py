"""What ``exactlyonce check`` reports for a sink behind a Kafka buffer: the Spark side into
the buffer topic (a KafkaSink's report), then the drain into the real sink (its guarantee,
its preconditions, the stored drain offsets) and the drain's dead letters, at least once.

Read-only: a missing offsets table or dead-letter topic is reported as what the drainer
creates at its start."""

from __future__ import annotations

from typing import TYPE_CHECKING

from exactlyonce.connectors.base.guarantee import (
    OK,
    Check,
    Guarantee,
    GuaranteeReport,
    absent,
    checked,
)
from exactlyonce.connectors.elasticsearch import ElasticsearchSink
from exactlyonce.connectors.kafka import preflight
from exactlyonce.connectors.postgres import PostgresSink
from exactlyonce.connectors.redis import RedisSink

if TYPE_CHECKING:
    from exactlyonce.buffer.buffered import Buffered
    from exactlyonce.connectors.base import ExactlyOnceSink


def drain_guarantee(sink: ExactlyOnceSink) -> Guarantee:
    """How the drainer keeps records and offsets together, per target (README's table)."""
    if isinstance(sink, PostgresSink):
        single = "the unique record-ID index" if sink.mode != "append" else "the dedup catalog"
        return Guarantee(
            "EXACTLY ONCE, ATOMIC",
            "one transaction writes a share's rows and its offsets in exactlyonce_drain_offsets "
            f"(rows locked and compared first); {single} keeps a re-read record single.",
        )
    if isinstance(sink, RedisSink):
        return Guarantee(
            "EXACTLY ONCE, ATOMIC",
            "one Lua script per share compares the stored offsets, stores the new ones and "
            "applies the records as the sink's own tasks do.",
        )
    assert isinstance(sink, ElasticsearchSink)
    return Guarantee(
        "EXACTLY ONCE, IDEMPOTENT then offsets",
        "bulk create with _id = record ID (a re-sent record is a 409), then the offsets "
        "document written with if_seq_no/if_primary_term and read back by realtime GET.",
    )


def drain_parts(buffered: Buffered) -> list[GuaranteeReport]:
    target = buffered.target
    drain = GuaranteeReport(
        f"drain {buffered.topic} -> {target.sink_name}",
        drain_guarantee(target),
        [*target.preconditions(), *checked("drain offsets", lambda: _offsets(buffered))],
    )
    topic = buffered.buffer.drain_dead_letter_topic
    dead = GuaranteeReport(
        f"drain dead letters -> {topic}",
        Guarantee(
            "AT LEAST ONCE",
            "undecodable messages and records the sink refuses are flushed to the topic "
            "before the offsets commit; a crash between the two sends them again.",
        ),
        checked("drain dead-letter topic", lambda: _dead_letter_topic(buffered, topic)),
    )
    return [drain, dead]


def _offsets(buffered: Buffered) -> Check:
    from exactlyonce.buffer.drain.targets import target_for

    name = "drain offsets"
    target = buffered.target
    if isinstance(target, PostgresSink) and not _pg_offsets_table(target):
        return absent(
            name, "the drainer creates exactlyonce_drain_offsets at its start", create_now=False
        )
    drain_target = target_for(target, buffered.topic, "exactlyonce-check")
    try:
        stored = drain_target.read_offsets()
    finally:
        drain_target.close()
    if not stored:
        return Check(name, OK, "none stored yet: the drainer starts at offset 0")
    shown = ", ".join(f"{p}:{o}" for p, o in sorted(stored.items()))
    return Check(name, OK, f"stored in {drain_target.where}: partition:next offset {shown}")


def _pg_offsets_table(sink: PostgresSink) -> bool:
    from exactlyonce.buffer.drain.postgres_target import OFFSETS
    from exactlyonce.connectors.postgres.schema import TableName, regclass

    with sink._connect() as conn:
        return regclass(conn, TableName(sink.table.schema, OFFSETS)) is not None


def _dead_letter_topic(buffered: Buffered, topic: str) -> Check:
    _, meta = preflight.connect(buffered)
    if topic in preflight.existing_topics(meta):
        return Check(f"topic {topic}", OK, "present")
    return absent(f"topic {topic}", "the drainer creates it at its start", create_now=False)
