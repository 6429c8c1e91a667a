"""The buffer's config model: where a Kafka buffer in front of a sink lives
(:class:`KafkaBuffer`), shared by the Spark side (:mod:`.buffer`) and the drainer."""

from __future__ import annotations

from pydantic import AliasChoices, Field, StrictInt, field_validator

from exactlyonce.connectors.base.config import Settings
from exactlyonce.connectors.kafka.config import ProducerValue, transaction_timeout_problem
from exactlyonce.connectors.kafka.protocol import DEFAULT_CONTROL_TOPIC, default_sink_name
from exactlyonce.connectors.kafka.reader import dead_letter_topic_for

DEFAULT_FRAME_RECORDS = 1000
DEFAULT_FRAME_BYTES = 256 * 1024


def drain_dead_letter_topic_for(topic: str) -> str:
    return f"{topic}.drain-dead-letters"


class KafkaBuffer(Settings):
    """Where the buffer lives. ``client_config`` (SASL, TLS...) goes to every client of the
    buffer; it may hold credentials, so it never prints.

    ``dead_letter_topic``: the KafkaSink's (records without a key, written by Spark), default
    ``<topic>.dead-letters``. ``drain_dead_letter_topic``: messages the drainer cannot
    write (undecodable value, no record ID, refused by the sink), default
    ``<topic>.drain-dead-letters``. ``frame_records``/``frame_bytes``: at most this many
    records, and this many bytes of values, per buffer message (capped at half the producer's
    ``message.max.bytes``); ``frame_records=1`` writes one message per record.
    """

    topic: str = Field(min_length=1)
    bootstrap_servers: str = Field(min_length=1)
    partitions: int | None = Field(default=None, ge=1)
    create_topic: bool = True
    control_topic: str = DEFAULT_CONTROL_TOPIC
    dead_letter_topic: str | None = None
    drain_dead_letter_topic_name: str | None = Field(
        default=None,
        validation_alias=AliasChoices("drain_dead_letter_topic_name", "drain_dead_letter_topic"),
    )
    transaction_timeout_ms: int = 60_000
    shards: int | None = Field(default=None, ge=1, le=4096)
    # librdkafka settings (SASL, TLS...); may hold credentials, so never in repr.
    client_config: dict[str, ProducerValue] = Field(default_factory=dict, repr=False)
    frame_records: StrictInt = Field(default=DEFAULT_FRAME_RECORDS, ge=1)
    frame_bytes: StrictInt = Field(default=DEFAULT_FRAME_BYTES, ge=1)

    @field_validator("transaction_timeout_ms")
    @classmethod
    def _timeout(cls, value: int) -> int:
        problem = transaction_timeout_problem(value)
        if problem is not None:
            raise ValueError(problem)
        return value

    @property
    def sink_dead_letter_topic(self) -> str:
        return self.dead_letter_topic or dead_letter_topic_for(self.topic)

    @property
    def drain_dead_letter_topic(self) -> str:
        return self.drain_dead_letter_topic_name or drain_dead_letter_topic_for(self.topic)

    @property
    def sink_name(self) -> str:
        """The buffer's head key on the control topic (the KafkaSink's default name)."""
        return default_sink_name(self.topic)
