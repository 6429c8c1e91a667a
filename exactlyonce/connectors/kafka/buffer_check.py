"""What ``exactlyonce check`` reports for a sink behind a Kafka buffer: the Spark side into
the buffer topic (a KafkaSink's report), then the drain into the real sink (its guarantee,
its preconditions, the stored drain offsets) and the drain's dead letters, at least once.

Read-only: a missing offsets table or dead-letter topic is reported as what the drainer
creates at its start."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from exactlyonce.connectors import registry
from exactlyonce.connectors.base.guarantee import (
    OK,
    Check,
    Guarantee,
    GuaranteeReport,
    absent,
    checked,
)
from exactlyonce.connectors.kafka import preflight

if TYPE_CHECKING:
    from exactlyonce.connectors.base import ExactlyOnceSink
    from exactlyonce.connectors.kafka.parts import BufferedParts


def drain_target_class(sink: ExactlyOnceSink) -> Any:
    """The drain target class of ``sink`` (its registry entry's ``drain``)."""
    target = registry.kind_of(sink).drain_target()
    assert target is not None, "a Buffered sink's target is drained (check_target)"
    return target


def drain_guarantee(sink: ExactlyOnceSink) -> Guarantee:
    """How the drainer keeps records and offsets together, per target."""
    guarantee: Guarantee = drain_target_class(sink).guarantee(sink)
    return guarantee


def drain_parts(buffered: BufferedParts) -> list[GuaranteeReport]:
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


def _offsets(buffered: BufferedParts) -> Check:
    name = "drain offsets"
    target = buffered.target
    if not drain_target_class(target).offsets_stored(target):
        return absent(name, "the drainer creates its offsets at its start", create_now=False)
    drain_target = drain_target_class(target)(target, buffered.topic, "exactlyonce-check")
    try:
        stored = drain_target.read_offsets()
    finally:
        drain_target.close()
    if not stored:
        return Check(name, OK, "none stored yet: the drainer starts at offset 0")
    shown = ", ".join(f"{p}:{o}" for p, o in sorted(stored.items()))
    return Check(name, OK, f"stored in {drain_target.where}: partition:next offset {shown}")


def _dead_letter_topic(buffered: BufferedParts, topic: str) -> Check:
    _, meta = preflight.connect(buffered)
    if topic in preflight.existing_topics(meta):
        return Check(f"topic {topic}", OK, "present")
    return absent(f"topic {topic}", "the drainer creates it at its start", create_now=False)
