"""What ``exactlyonce check`` reports for a KafkaSink: its guarantee, and its preconditions
read from the broker (topics, the transaction timeout, whether ``read_committed`` hides
aborted records), creating no topic.

The broker probe (:func:`.preflight.probe`) runs only when the probe topic exists already
(every start creates it): it writes one aborted and one plain record there, under the
probe's stable ``transactional.id`` (``eo-<query>-<sink hash>--1``, DESIGN invariant 10), as
the sink's own start does. Its ``init_transactions`` fences an older probe of the same sink,
so do not run ``check`` at the very moment that sink starts.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from exactlyonce.connectors.base.guarantee import (
    FAILING,
    OK,
    WARNING,
    Check,
    Guarantee,
    absent,
    checked,
)
from exactlyonce.connectors.kafka import preflight

if TYPE_CHECKING:
    from confluent_kafka.admin import AdminClient

    from exactlyonce.connectors.kafka.parts import KafkaParts

MECHANISM = (
    "one Kafka transaction per shard from a fenced idempotent producer (transactional.id "
    "stable per query, sink and shard) writes the records with a commit marker; "
    "confirmations and the head (with the topic's frontier) on the compacted control topic "
    "make a restart skip committed epochs and readers count confirmed attempts only."
)


def guarantee(sink: KafkaParts) -> Guarantee:
    return Guarantee(
        "EXACTLY ONCE for read_committed readers on a broker that hides aborted records "
        "(Apache Kafka), and for the consumption recipe on any broker",
        MECHANISM,
    )


def preconditions(sink: KafkaParts) -> list[Check]:
    def run() -> list[Check]:
        admin, meta = preflight.connect(sink)
        existing = preflight.existing_topics(meta)
        checks = [Check("Kafka", OK, f"reachable at {sink.bootstrap_servers}")]
        checks.append(_data_topic(sink, existing))
        checks.extend(checked("control topic", lambda: _control_topic(sink, admin, existing)))
        checks.append(
            Check("dead-letter topic", OK, f"{sink.dead_letter_topic} present")
            if sink.dead_letter_topic in existing
            else absent(f"dead-letter topic {sink.dead_letter_topic}", "created at every start")
        )
        checks.extend(checked("transaction timeout", lambda: _timeout(sink, admin, meta)))
        checks.extend(checked("broker hides aborted records", lambda: _probe(sink, existing)))
        return checks

    return checked("Kafka", run)


def _data_topic(sink: KafkaParts, existing: set[str]) -> Check:
    name = f"topic {sink.topic}"
    if sink.topic in existing:
        return Check(name, OK, "present")
    if sink.create_topic:
        return absent(name, "the sink creates it at start (create_topic is on)")
    return Check(
        name,
        FAILING,
        "does not exist and create_topic is off: the start would refuse",
        "create the topic, or set create_topic: true",
    )


def _control_topic(sink: KafkaParts, admin: AdminClient, existing: set[str]) -> Check:
    name = f"control topic {sink.control_topic}"
    if sink.control_topic not in existing:
        return absent(name, "created (compacted) at every start")
    preflight.check_compacted(sink, admin)
    return Check(name, OK, "present, compacted")


def _timeout(sink: KafkaParts, admin: AdminClient, meta: Any) -> Check:
    preflight.check_timeout(sink, admin, meta)
    return Check(
        "transaction timeout",
        OK,
        f"transaction.timeout.ms={sink.transaction_timeout_ms} within the broker's "
        "transaction.max.timeout.ms",
    )


def _probe(sink: KafkaParts, existing: set[str]) -> Check:
    name = "broker hides aborted records"
    if sink.probe_topic not in existing:
        return Check(
            name,
            WARNING,
            f"not probed: the probe topic {sink.probe_topic} does not exist yet (every start "
            "creates it and probes); the recipe reader is exact either way",
            "`exactlyonce check --create` creates it and probes",
        )
    if preflight.probe(sink):
        return Check(
            name,
            OK,
            "yes (probed): a plain read_committed consumer sees each record once",
        )
    return Check(
        name,
        WARNING,
        "NO (probed): this broker delivers aborted records to read_committed consumers (or the "
        "probe was inconclusive); only readers following the recipe "
        "(exactlyonce.connectors.kafka.reader) see each record once",
        "read the topic with the recipe (KafkaSink.commits() / confirmed records)",
    )
