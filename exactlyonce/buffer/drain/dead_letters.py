"""The drain's dead letters: messages the drainer cannot write, with the reason, to a topic.

At-least-once: a share's dead letters are produced and flushed before its sink transaction
commits, so none is lost, but a crash between the two may write one again; each carries its
source coordinates (``eo-source-topic``/``-partition``/``-offset`` headers) to tell repeats
apart, and the drainer's name (``eo-drainer``).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

from exactlyonce.connectors.base.drain import Letter
from exactlyonce.connectors.kafka.buffer_config import KafkaBuffer
from exactlyonce.connectors.kafka.clients import produce_waiting
from exactlyonce.connectors.kafka.preflight import await_listed
from exactlyonce.connectors.kafka.reader import H_ERROR, offset_of, shared_config, where_of
from exactlyonce.errors import SinkUnavailableError

log = logging.getLogger("exactlyonce.drainer")

H_SOURCE_TOPIC = "eo-source-topic"
H_SOURCE_PARTITION = "eo-source-partition"
H_SOURCE_OFFSET = "eo-source-offset"
H_DRAINER = "eo-drainer"


class DeadLetters:
    """The drain dead-letter topic of ``buffer``, written by drainer ``name``.

    ``scrub`` removes secrets from error text; ``owner`` names the drainer in log lines.
    :meth:`send` is thread-safe (the drainer's writers share one producer).
    """

    def __init__(
        self,
        buffer: KafkaBuffer,
        name: str,
        kafka_timeout_s: float,
        scrub: Callable[[str], str],
        owner: object,
    ) -> None:
        self.buffer = buffer
        self.topic = buffer.drain_dead_letter_topic
        self.name = name
        self.kafka_timeout_s = kafka_timeout_s
        self._scrub = scrub
        self._owner = owner
        self._lock = threading.Lock()
        self._producer: Producer | None = None

    def _config(self) -> dict[str, Any]:
        return {
            **shared_config(self.buffer.client_config),
            "bootstrap.servers": self.buffer.bootstrap_servers,
        }

    def ensure_topic(self) -> None:
        """Create the dead-letter topic unless it exists (a race with another drainer is fine)."""
        errors: list[str] = []
        config: dict[str, Any] = {
            **self._config(),
            "error_cb": lambda err: errors.append(err.str()),
        }
        admin = AdminClient(config)
        try:
            meta = admin.list_topics(timeout=self.kafka_timeout_s)
        except KafkaException as exc:
            raise SinkUnavailableError(
                f"Kafka at {self.buffer.bootstrap_servers}: {self._scrub(str(exc))}"
            ) from None
        if self.topic in meta.topics and meta.topics[self.topic].error is None:
            return
        futures = admin.create_topics(
            [NewTopic(self.topic, num_partitions=1, replication_factor=-1)]
        )
        try:
            futures[self.topic].result()
        except KafkaException as exc:
            if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                raise SinkUnavailableError(
                    f"cannot create dead-letter topic {self.topic!r}: {self._scrub(str(exc))}"
                ) from None
        await_listed(admin, [self.topic], self.kafka_timeout_s)

    def send(self, letters: list[Letter]) -> None:
        """Produce and flush (the caller commits its sink transaction only after this
        returns): never lost, at worst repeated. Raises SinkUnavailableError if the broker
        did not acknowledge every one."""
        with self._lock:
            self._produce(letters)

    def _produce(self, letters: list[Letter]) -> None:
        if self._producer is None:
            self._producer = Producer({**self._config(), "enable.idempotence": True, "acks": "all"})
        failures: list[str] = []

        def delivered(err: KafkaError | None, _msg: Any) -> None:
            if err is not None:
                failures.append(err.str())

        for msg, reason in letters:
            produce_waiting(
                self._producer,
                self.topic,
                msg.value(),
                msg.key(),
                headers=self._headers(msg, reason),
                on_delivery=delivered,
            )
        left = self._producer.flush(self.kafka_timeout_s)
        if left or failures:
            why = failures[0] if failures else f"{left} not acknowledged"
            raise SinkUnavailableError(f"dead letters not written: {self._scrub(why)}")
        for msg, reason in letters:
            log.warning(
                "%s: dead letter %s[%d]@%d: %s", self._owner, *where_of(msg), offset_of(msg), reason
            )

    def _headers(self, msg: Any, reason: str) -> list[tuple[str, str | bytes | None]]:
        topic, partition = where_of(msg)
        headers: list[tuple[str, str | bytes | None]]
        headers = [(k, v) for k, v in msg.headers() or [] if k != H_ERROR]
        return [
            *headers,
            (H_ERROR, reason.encode()),
            (H_SOURCE_TOPIC, topic.encode()),
            (H_SOURCE_PARTITION, str(partition).encode()),
            (H_SOURCE_OFFSET, str(offset_of(msg)).encode()),
            (H_DRAINER, self.name.encode()),
        ]

    def close(self) -> None:
        """Flush what is left (up to 10 s) and drop the producer. Safe to call twice."""
        if self._producer is not None:
            self._producer.flush(10)
            self._producer = None
