"""Following the buffer's control topic: which attempts committed, and how far the heads reach.

The consumption recipe of :mod:`exactlyonce.connectors.kafka.reader`, incrementally: the
drainer folds the control topic's new records (heads, commit confirmations) into one
:class:`~exactlyonce.connectors.kafka.reader.Commits` as the topic grows, instead of reading it
whole per chunk. The latest head's frontier says how far the drainer may read; the heads'
``written_at`` say how old the oldest undrained epoch is (the lag in seconds).
"""

from __future__ import annotations

import json
import time
from collections import deque
from collections.abc import Callable, Mapping
from typing import Any

from exactlyonce.connectors.kafka.buffer_config import KafkaBuffer
from exactlyonce.connectors.kafka.reader import (
    START,
    Commits,
    control_prefix,
    drain,
    offset_of,
    partitions_of,
    where_of,
)

MAX_HEADS = 10_000  # heads kept for the lag in seconds; older ones are dropped first


class ControlFollower:
    """The control topic of one buffer, as far as one drainer (member) has read it.

    Read from offset 0 (DESIGN invariant 11), never from "earliest"; :meth:`refresh` only
    moves forward, so :attr:`commits` and :meth:`frontier` never go back.
    """

    def __init__(
        self,
        buffer: KafkaBuffer,
        query_name: str,
        mine: Callable[[int], bool],
        kafka_timeout_s: float,
    ) -> None:
        self.topic = buffer.topic
        self.control_topic = buffer.control_topic
        self.commits = Commits(query_name, buffer.sink_name)
        self.kafka_timeout_s = kafka_timeout_s
        self.read_at = 0.0  # monotonic time of the last refresh
        self._mine = mine
        self._head_key = (control_prefix(query_name, buffer.sink_name) + "head").encode()
        self._positions: dict[int, int] = {}
        self._heads: deque[tuple[float, dict[int, int]]] = deque()

    def refresh(self, client: Any) -> None:
        """Fold the control topic's new records into :attr:`commits` (recipe step 1)."""
        control = self.control_topic
        if not self._positions:
            parts = partitions_of(client, control, self.kafka_timeout_s)
            self._positions = {p: START for p in parts}
        ranges: dict[tuple[str, int], tuple[int, int | None]] = {
            (control, p): (start, None) for p, start in self._positions.items()
        }
        self.read_at = time.monotonic()
        for msg in drain(client, ranges, self.kafka_timeout_s, f"control topic {control!r}"):
            _, p = where_of(msg)
            self._positions[p] = offset_of(msg) + 1
            self.commits.add(msg)
            value = msg.value()
            if value and msg.key() == self._head_key:
                self._note_head(value)

    def _note_head(self, value: bytes) -> None:
        try:
            data = json.loads(value)
            frontier = {int(p): int(o) for p, o in data["frontier"].get(self.topic, {}).items()}
            written_at = float(data.get("written_at") or time.time())
        except (ValueError, KeyError, TypeError, AttributeError):
            return
        self._heads.append((written_at, {p: o for p, o in frontier.items() if self._mine(p)}))
        while len(self._heads) > MAX_HEADS:
            self._heads.popleft()

    def frontier(self) -> dict[int, int]:
        """The latest head's frontier of this drainer's partitions."""
        return {p: e for p, e in self.commits.frontier(self.topic).items() if self._mine(p)}

    def records_per_offset(self) -> float:
        """Records per offset of the buffer so far: every confirmed attempt's records over
        the offsets up to the head's frontier (all partitions: attempts span them)."""
        offsets = sum(self.commits.frontier(self.topic).values())
        return self.commits.records / offsets if offsets and self.commits.records else 1.0

    def oldest_undrained(self, positions: Mapping[int, int]) -> float | None:
        """When the oldest head not yet drained up to was written (epoch seconds), or None;
        heads the ``positions`` have passed are forgotten."""
        while self._heads and all(positions.get(p, 0) >= o for p, o in self._heads[0][1].items()):
            self._heads.popleft()
        return self._heads[0][0] if self._heads else None
