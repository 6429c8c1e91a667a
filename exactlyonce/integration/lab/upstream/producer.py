"""The lab's upstream: an at-least-once producer (confluent-kafka, no idempotence, acks=all)
that writes the planned records (:mod:`exactlyonce.integration.lab.events`) into a topic (the
demo's input, a Kafka source's under ``exactlyonce chaos --events``), in order, keyed by
their key column (``event_id``). Its duplicates are the plan's: every record is sent
once, and all are acknowledged before :func:`produce` returns."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from confluent_kafka import KafkaError, Message, Producer

from exactlyonce.connectors.kafka.clients import client_log, produce_waiting
from exactlyonce.integration.lab.events import Record
from exactlyonce.progress import Progress

FLUSH_TIMEOUT_S = 60.0

Coordinates = tuple[str, int, int]  # (topic, partition, offset) of an acknowledged record


def producer_config(bootstrap: str) -> dict[str, Any]:
    """At least once: acks from every in-sync replica, retries that may duplicate. Its log
    goes to Python's logging (:mod:`.logs`), not straight to stderr."""
    return {
        "bootstrap.servers": bootstrap,
        "enable.idempotence": False,
        "acks": "all",
        "linger.ms": 20,
        "logger": client_log,
    }


def produce(
    bootstrap: str, topic: str, records: Sequence[Record], key_column: str = "event_id"
) -> list[Coordinates]:
    """Send every record (key: its ``key_column``, value: JSON) and wait for every ack; where
    the broker put each one, as its delivery reports say (in the order they came).

    The acks are counted as they come (:class:`~exactlyonce.progress.Progress`: a bar on a
    terminal, plain lines otherwise). Raises ``SystemExit`` naming the first failure if any
    record was not acknowledged."""
    producer = Producer(producer_config(bootstrap))
    failures: list[str] = []
    placed: list[Coordinates] = []
    progress = Progress(f"producing to {topic}", total=len(records), unit="records")

    def delivered(err: KafkaError | None, msg: Message) -> None:
        if err is not None:
            failures.append(str(err))
        else:
            placed.append((str(msg.topic()), int(msg.partition() or 0), int(msg.offset() or 0)))
        progress.update(1)

    for record in records:
        key = record[key_column]
        value = json.dumps(record).encode()
        encoded = None if key is None else str(key).encode()
        produce_waiting(producer, topic, value, encoded, on_delivery=delivered)
        producer.poll(0)
    left = producer.flush(FLUSH_TIMEOUT_S)
    progress.close()
    if left or failures:
        why = failures[0] if failures else f"{left} record(s) unacknowledged"
        raise SystemExit(f"producing to {topic} failed: {why}")
    return placed
