"""How far the sink is behind the buffer: :class:`Lag` and how it is computed.

``records`` is the number of offsets between the stored positions and the end of each
partition (committed records, plus records of epochs still in flight), times the buffer's
records per offset (every confirmed attempt's record count over the head's frontier; a frame
holds many records, transaction markers none). ``seconds`` is how long ago the oldest
committed-but-undrained epoch was committed to the buffer (0 when caught up). Both come from
the broker and the last known positions, so the lag stays current while the sink is down.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from confluent_kafka import TopicPartition

from exactlyonce.buffer.drain.control import ControlFollower


@dataclass
class Lag:
    """How far the sink is behind the buffer."""

    records: int = 0
    seconds: float = 0.0

    def __str__(self) -> str:
        return f"{self.records} records, {self.seconds:.1f}s behind"


def compute_lag(
    client: Any,
    topic: str,
    partitions: Iterable[int],
    positions: Mapping[int, int],
    control: ControlFollower,
    timeout_s: float,
) -> Lag:
    """The lag of ``positions`` over ``partitions``: one broker round trip per partition."""
    frontier = control.frontier()
    offsets = 0
    for p in partitions:
        _, high = client.get_watermark_offsets(
            TopicPartition(topic, p), timeout=timeout_s, cached=False
        )
        end = max(high, frontier.get(p, 0))
        offsets += max(0, end - positions.get(p, 0))
    records = round(offsets * control.records_per_offset())
    oldest = control.oldest_undrained(positions)
    seconds = max(0.0, time.time() - oldest) if oldest is not None and records else 0.0
    return Lag(records, seconds)
