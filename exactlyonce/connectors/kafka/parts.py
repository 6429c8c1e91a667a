"""What the preflight and the check (:mod:`.preflight`, :mod:`.check`) use of a
:class:`~exactlyonce.connectors.kafka.sink.KafkaSink`: its public parts, named here so that
they depend on these and not on the sink's module (no import cycle)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from exactlyonce.connectors.base.sink import ExactlyOnceSink
    from exactlyonce.connectors.kafka.buffer_config import KafkaBuffer
    from exactlyonce.connectors.kafka.clients import KafkaClients


class KafkaParts(Protocol):
    query_name: str
    bootstrap_servers: str
    topic: str
    control_topic: str
    probe_topic: str
    dead_letter_topic: str
    create_topic: bool
    partitions: int | None
    connect_timeout: float
    transaction_timeout_ms: int
    timeout_field: str  # the setting that named the transaction timeout, for messages
    max_message_bytes: int  # the preflight lowers it to what the broker takes
    clients: KafkaClients

    @property
    def sink_name(self) -> str: ...

    @property
    def where(self) -> str:
        """The brokers, for messages (never a credential)."""
        ...


class BufferedParts(KafkaParts, Protocol):
    """A :class:`~exactlyonce.connectors.kafka.buffer.Buffered` as its drain check
    (:mod:`.buffer_check`) sees it: the buffer topic's sink, the real sink, the buffer."""

    target: ExactlyOnceSink
    buffer: KafkaBuffer
