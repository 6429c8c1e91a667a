"""The Kafka clients of a sink's driver side, built from one user configuration.

The user's ``producer_config`` is kept as a :class:`~exactlyonce.secrets.Secret` (JSON), so
nothing here prints it; every error text a client returns goes through :meth:`scrub`.
Connections open lazily: the admin client per preflight, the head's producer and consumer
once, kept across epochs. Two helpers serve every producer, the tasks' too:
:func:`produce_waiting` and :func:`init_transactions`.
"""

from __future__ import annotations

import contextlib
import json
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient

from exactlyonce.connectors.kafka.consume import client_log as client_log  # re-exported
from exactlyonce.connectors.kafka.consume import consumer
from exactlyonce.connectors.kafka.protocol import shared_config
from exactlyonce.secrets import Secret, scrub


def produce_waiting(producer: Producer, topic: str, value: Any, key: Any, **kwargs: Any) -> None:
    """``produce()``, waiting while the local queue is full: flow control, not a retry (the
    wait serves deliveries, which is what frees the queue). Every produce after other
    records of the same producer needs it: a control record after a shard's data too."""
    while True:
        try:
            producer.produce(topic, value, key, **kwargs)
            return
        except BufferError:
            producer.poll(0.05)  # local queue full: let deliveries drain


def init_transactions(producer: Producer, topic: str, timeout_s: float) -> None:
    """``producer.init_transactions()`` without librdkafka's 500 ms coordinator stall.

    librdkafka (2.16) answers the first metadata request on its bootstrap connection, then
    drops that connection for the broker's advertised one. An ``init_transactions()`` in that
    gap finds no broker up, and waits for its coordinator query timer (500 ms) to try again:
    15 of 40 fresh producers here (Tansu). A second metadata request cannot be served by the
    dropped bootstrap connection, so it returns only once a real broker is up: 0 of 40 stalls,
    17 ms for create + metadata + init on average (was 201 ms).

    Fences older producers of the same ``transactional.id``: their open transaction is
    aborted, and they can commit nothing after this returns.
    """
    wait = min(10.0, timeout_s)
    for _ in range(2):
        with contextlib.suppress(KafkaException):
            producer.list_topics(topic, timeout=wait)
    producer.init_transactions(timeout_s)


class KafkaClients:
    """One sink's driver-side clients. Not picklable in spirit: stays in the driver."""

    def __init__(self, bootstrap_servers: str, config: Secret, secrets: list[str]) -> None:
        self.bootstrap_servers = bootstrap_servers
        self.config = config
        self.secrets = secrets
        self._producer: Producer | None = None
        self._reader: Consumer | None = None

    def user_config(self) -> dict[str, Any]:
        return dict(json.loads(self.config.reveal()))

    def scrub(self, text: str) -> str:
        return scrub(text, *self.secrets)

    def admin(self, errors: list[str]) -> AdminClient:
        """An admin client whose connection errors are appended to ``errors``."""

        def on_error(err: KafkaError) -> None:
            errors.append(err.str())

        config: dict[str, Any] = {
            **shared_config(self.user_config()),
            "bootstrap.servers": self.bootstrap_servers,
            "error_cb": on_error,
            "logger": client_log,
            "log_level": 2,  # connection failures arrive through error_cb, once, in our error
        }
        return AdminClient(config)

    def consumer(self, isolation: str = "read_uncommitted") -> Consumer:
        return consumer(self.bootstrap_servers, self.user_config(), isolation=isolation)

    def reader(self) -> Consumer:
        """The driver's read_uncommitted consumer, kept across epochs (reads leave it
        unassigned)."""
        if self._reader is None:
            self._reader = self.consumer()
        return self._reader

    def producer(self) -> Producer:
        """The driver's idempotent (not transactional) producer for head records."""
        if self._producer is None:
            config = {
                **self.user_config(),
                "bootstrap.servers": self.bootstrap_servers,
                "enable.idempotence": True,
                "acks": "all",
                "linger.ms": 0,
                "logger": client_log,
            }
            self._producer = Producer(config)
        return self._producer

    def transactional(self, transactional_id: str, timeout_ms: int) -> Producer:
        """A new producer for ``transactional_id`` (not initialised: see
        :func:`init_transactions`)."""
        return Producer(
            {
                **self.user_config(),
                "bootstrap.servers": self.bootstrap_servers,
                "transactional.id": transactional_id,
                "enable.idempotence": True,
                "acks": "all",
                "transaction.timeout.ms": timeout_ms,
                "logger": client_log,
            }
        )
