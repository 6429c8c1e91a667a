"""The drainer's Kafka consumers: one per role, and the buffer topic's partitions.

Every consumer reads ``read_uncommitted`` with ``assign()`` and explicit offsets, never a
consumer group: the recipe decides by confirmations (correct on every broker), and an open
transaction past the frontier cannot hold reads back. The chunks' consumer has
``auto.offset.reset=error``: records that expired under the drainer stop its read (see
:mod:`.positions`), where ``earliest`` would have skipped them.
"""

from __future__ import annotations

import contextlib
import time
from typing import Any

from exactlyonce.connectors.kafka.buffer_config import KafkaBuffer
from exactlyonce.connectors.kafka.reader import RangeReader, consumer, partitions_of

PARTITIONS_EVERY_S = 10.0  # how often the buffer topic's partitions are listed again


class BufferClients:
    """Consumers of ``buffer`` by role: ``read`` (the chunks, through one
    :class:`RangeReader`), ``control`` (the control topic), ``data`` (ends, starts, lists)."""

    def __init__(self, buffer: KafkaBuffer, kafka_timeout_s: float) -> None:
        self.buffer = buffer
        self.kafka_timeout_s = kafka_timeout_s
        self._clients: dict[str, Any] = {}
        self._range_reader: RangeReader | None = None
        self._partitions: tuple[float, list[int]] | None = None

    def client(self, role: str) -> Any:
        """The consumer of ``role``. The ``read`` role's never jumps over a range that
        expired: a fetch below the partition's start is an error, not a skip."""
        if role not in self._clients:
            self._clients[role] = consumer(
                self.buffer.bootstrap_servers,
                self.buffer.client_config,
                isolation="read_uncommitted",
                offset_reset="error" if role == "read" else "earliest",
            )
        return self._clients[role]

    def reader(self) -> RangeReader:
        """The buffer's reader: one consumer, assigned across chunks (see RangeReader)."""
        if self._range_reader is None:
            topic = self.buffer.topic
            self._range_reader = RangeReader(
                self.client("read"), topic, self.kafka_timeout_s, f"buffer topic {topic!r}"
            )
        return self._range_reader

    def partitions(self) -> list[int]:
        """The buffer topic's partitions, listed again at most every PARTITIONS_EVERY_S."""
        now = time.monotonic()
        if self._partitions is None or now - self._partitions[0] >= PARTITIONS_EVERY_S:
            found = partitions_of(self.client("data"), self.buffer.topic, self.kafka_timeout_s)
            self._partitions = (now, found)
        return self._partitions[1]

    def forget_partitions(self) -> None:
        """List the partitions afresh next time ((re)start, or after a failure)."""
        self._partitions = None

    def close(self) -> None:
        """Close every consumer (errors ignored). Safe to call twice; clients reopen lazily."""
        for client in self._clients.values():
            with contextlib.suppress(Exception):
                client.close()
        self._clients.clear()
        self._range_reader = None
