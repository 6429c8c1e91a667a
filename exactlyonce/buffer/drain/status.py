"""Where a buffered pipeline's drainer is, read without draining or creating anything: the
drain offsets the sink holds and the lag behind the buffer (``exactlyonce heads``)."""

from __future__ import annotations

from dataclasses import dataclass

from exactlyonce.buffer.drain.clients import BufferClients
from exactlyonce.buffer.drain.control import ControlFollower
from exactlyonce.buffer.drain.lag import Lag, compute_lag
from exactlyonce.buffer.drain.targets import target_for
from exactlyonce.connectors.kafka.buffer import Buffered

KAFKA_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class DrainStatus:
    """The drain offsets (partition -> next offset) the sink holds, and the lag (None while
    the buffer topic does not exist)."""

    topic: str
    target: str
    positions: dict[int, int]
    lag: Lag | None


def drain_status(buffered: Buffered, kafka_timeout_s: float = KAFKA_TIMEOUT_S) -> DrainStatus:
    """Read-only: the stored offsets (every partition's, as a single drainer sees them), the
    control topic folded in from offset 0, and each partition's end."""
    buffer = buffered.buffer
    target = target_for(buffered.target, buffer.topic, "exactlyonce-heads")
    try:
        positions = target.read_offsets()
    finally:
        target.close()
    clients = BufferClients(buffer, kafka_timeout_s)
    try:
        lag = _lag(buffered, clients, positions, kafka_timeout_s)
    finally:
        clients.close()
    return DrainStatus(buffer.topic, buffered.target.sink_name, positions, lag)


def _lag(
    buffered: Buffered, clients: BufferClients, positions: dict[int, int], timeout_s: float
) -> Lag | None:
    buffer = buffered.buffer
    meta = clients.client("data").list_topics(timeout=timeout_s)  # all: never creates one
    for topic in (buffer.topic, buffer.control_topic):
        found = meta.topics.get(topic)
        if found is None or found.error is not None or not found.partitions:
            return None
    control = ControlFollower(buffer, buffered.query_name, lambda p: True, timeout_s)
    control.refresh(clients.client("control"))
    return compute_lag(
        clients.client("data"), buffer.topic, clients.partitions(), positions, control, timeout_s
    )


__all__ = ["DrainStatus", "drain_status"]
