"""The Kafka sink's settings: every rule and default, once (see ``base/config.py``)."""

from __future__ import annotations

import json
import re
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from exactlyonce.connectors.base.config import SinkConfig, field_error
from exactlyonce.connectors.kafka.avro import AVRO
from exactlyonce.connectors.kafka.protocol import (
    DEFAULT_CONTROL_TOPIC,
    MIN_TRANSACTION_TIMEOUT_MS,
    dead_letter_topic_for,
)

TIMEOUT_KEY = "transaction.timeout.ms"
_TOPIC_NAME = re.compile(r"^[A-Za-z0-9._-]{1,249}$")
# Settings the protocol depends on; a user's producer_config may not change them.
_RESERVED_CONFIG = {
    "bootstrap.servers": "pass bootstrap_servers=... instead",
    "transactional.id": "the sink derives it per (query, sink, shard) so re-runs fence zombies",
    "isolation.level": "the sink chooses it per read",
}
_REQUIRED_CONFIG = {"enable.idempotence": (True, "true"), "acks": ("all", "-1", -1)}
ProducerValue = str | int | float | bool


def transaction_timeout_problem(timeout: object) -> str | None:
    """What is wrong with a transaction timeout (ms), or None: THE rule, for the sink and for
    a buffer's settings alike."""
    if isinstance(timeout, str) and timeout.isdigit():
        timeout = int(timeout)
    if isinstance(timeout, bool) or not isinstance(timeout, int):
        return f"transaction.timeout.ms must be an integer, got {timeout!r}"
    if timeout < MIN_TRANSACTION_TIMEOUT_MS:
        return (
            f"transaction.timeout.ms={timeout} is below {MIN_TRANSACTION_TIMEOUT_MS}: each "
            "task writes its whole shard inside one transaction, and the broker aborts "
            "transactions older than this"
        )
    return None


class KafkaSinkConfig(SinkConfig):
    """:class:`~exactlyonce.connectors.kafka.KafkaSink`'s settings.

    ``producer_config`` holds librdkafka settings (SASL, TLS...): values under secret-like
    keys never print. ``transaction.timeout.ms`` may be given there instead of
    ``transaction_timeout_ms``; either way it must be at least 10,000 ms.
    """

    type: Literal["kafka"] = "kafka"
    bootstrap_servers: str
    topic: str
    key_column: str | None = Field(default=None, min_length=1)
    value: str = Field(default="json", min_length=1)
    control_topic: str = DEFAULT_CONTROL_TOPIC
    dead_letter_topic: str | None = None
    create_topic: bool = False
    partitions: int | None = Field(default=None, ge=1)
    producer_config: dict[str, ProducerValue] = Field(default_factory=dict, repr=False)
    transaction_timeout_ms: int | str = 60_000
    connect_timeout: float = Field(default=10.0, gt=0)

    @property
    def destination(self) -> str:
        return self.topic

    @field_validator("bootstrap_servers")
    @classmethod
    def _servers(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("a comma-separated host:port list is required")
        return value.strip()

    @field_validator("topic", "control_topic", "dead_letter_topic")
    @classmethod
    def _topic_name(cls, name: str | None) -> str | None:
        if name is not None and (not _TOPIC_NAME.match(name) or name in (".", "..")):
            raise ValueError(f"not a valid Kafka topic name: {name!r} (1-249 of [A-Za-z0-9._-])")
        return name

    @field_validator("producer_config", mode="before")
    @classmethod
    def _producer_config(cls, config: Any) -> Any:
        if config is None:
            return {}
        if not isinstance(config, dict):
            return config
        for name, why in _RESERVED_CONFIG.items():
            if name in config:
                raise ValueError(f"{name!r} cannot be set: {why}")
        for name, allowed in _REQUIRED_CONFIG.items():
            if name in config and config[name] not in allowed:
                raise ValueError(f"{name!r} must stay {allowed[0]!r} for exactly-once")
        try:
            json.dumps(config)
        except TypeError:
            raise ValueError("values must be strings, numbers or booleans") from None
        return config

    @model_validator(mode="after")
    def _topics_and_timeout(self) -> KafkaSinkConfig:
        if len({self.topic, self.control_topic, self.dead_letter_topic_name}) != 3:
            raise field_error("control_topic", "topic, control and dead-letter topics must differ")
        problem = transaction_timeout_problem(
            self.producer_config.get(TIMEOUT_KEY, self.transaction_timeout_ms)
        )
        if problem is not None:
            raise field_error(self.timeout_field, problem)
        return self

    def needs_spark_connectors(self) -> bool:
        """Avro values are encoded with ``spark-avro`` (:mod:`.avro`)."""
        return self.value == AVRO

    @property
    def dead_letter_topic_name(self) -> str:
        return self.dead_letter_topic or dead_letter_topic_for(self.topic)

    @property
    def timeout_field(self) -> str:
        """Where the transaction timeout was set, to name it in errors."""
        if TIMEOUT_KEY in self.producer_config:
            return f"producer_config[{TIMEOUT_KEY!r}]"
        return "transaction_timeout_ms"

    @property
    def timeout_ms(self) -> int:
        """The transaction timeout, from producer_config or transaction_timeout_ms."""
        return int(self.producer_config.get(TIMEOUT_KEY, self.transaction_timeout_ms))

    def client_config(self) -> dict[str, ProducerValue]:
        """``producer_config`` without the timeout (the sink sets it per producer)."""
        return {k: v for k, v in self.producer_config.items() if k != TIMEOUT_KEY}
