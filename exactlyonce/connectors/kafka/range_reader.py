"""Consecutive offset ranges of one topic with one consumer that stays assigned (the
buffer's drainer reads this way)."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator, Mapping
from typing import Any

from confluent_kafka import Consumer, KafkaError, TopicPartition

from exactlyonce.connectors.kafka.consume import arrived
from exactlyonce.errors import SinkUnavailableError


class RangeReader:
    """Reads consecutive offset ranges of one topic's partitions with one consumer that stays
    assigned: records fetched past a range's end are held for the next range, not dropped
    and fetched again (as :func:`drain` does, unassigning after each call). Yields the
    records of each ``consume()`` call as one list, so the per-record work is a few C calls.

    A range that does not start where the last one ended (a retry after a failure, a
    partition joining or leaving) re-assigns the consumer at the new starts. One reader at a
    time: not thread-safe.

    With a consumer whose ``auto.offset.reset`` is ``error``, a fetch out of range (the records
    at the reader's offset expired) raises SinkUnavailableError, never skipping to the
    partition's new start; with ``earliest`` the consumer would skip there silently.
    """

    def __init__(self, client: Consumer, topic: str, timeout_s: float, what: str = "") -> None:
        self.client = client
        self.topic = topic
        self.timeout_s = timeout_s
        self.what = what or f"topic {topic!r}"
        self._next: dict[int, int] = {}  # partition -> where the next range must start
        self._held: dict[int, list[Any]] = {}  # records at or past that, consumed already
        # Where each partition's end-of-partition event said it ended: the event comes once
        # per assignment, after every record before it, so a later range ending at or below
        # it is complete once the held records are taken.
        self._eof: dict[int, int] = {}

    def read(self, ranges: Mapping[int, tuple[int, int]]) -> Iterator[list[Any]]:
        """Every record of ``partition -> [start, end)``, in offset order per partition."""
        expected, self._next = self._next, {}  # unknown until this read ends (or is dropped)
        starts = {p: start for p, (start, _) in ranges.items()}
        if starts != expected:
            self._assign(starts)
        todo = {p: r for p, r in ranges.items() if r[0] < r[1]}
        held = self._take_held(todo, starts)
        for p, (_, end) in list(todo.items()):
            if self._eof.get(p, -1) >= end:
                del todo[p]
        if held:
            yield held
        deadline = time.monotonic() + self.timeout_s
        while todo:
            if time.monotonic() > deadline:
                self.reset()
                left = ", ".join(f"{self.topic}[{p}]" for p in sorted(todo))
                raise SinkUnavailableError(
                    f"reading {self.what} made no progress towards the end of {left} for "
                    f"{self.timeout_s:.0f}s"
                )
            batch: list[Any] = arrived(self.client, 0.02, most=2000)
            if batch:
                deadline = time.monotonic() + self.timeout_s  # a deadline for progress
            out = self._sort(batch, todo, starts)
            if out:
                yield out
        self._next = {p: end for p, (_, end) in ranges.items()}

    def _sort(
        self, batch: list[Any], todo: dict[int, tuple[int, int]], starts: Mapping[int, int]
    ) -> list[Any]:
        """The records of ``batch`` inside ``todo``'s ranges. Records past a range are held
        for the next one; a partition whose range is read leaves ``todo``."""
        out = []
        for msg in batch:
            err = msg.error()
            p = msg.partition()
            offset = msg.offset()
            if err is not None:
                if err.code() == KafkaError._PARTITION_EOF:
                    self._eof[p] = offset
                    bounds = todo.get(p)
                    if bounds is not None and offset >= bounds[1]:
                        del todo[p]
                    continue
                if err.code() == KafkaError._AUTO_OFFSET_RESET:
                    self.reset()
                    raise SinkUnavailableError(
                        f"reading {self.what}: offset {_at(offset, starts.get(p))} of "
                        f"{self.topic}[{p}] is out of range (records expired, or the topic was "
                        "re-created): nothing read past it; the positions are checked again"
                    )
                if err.code() == KafkaError.UNKNOWN_TOPIC_OR_PART or err.fatal():
                    self.reset()
                    raise SinkUnavailableError(f"reading {self.what}: {err.str()}")
                continue  # transient (transport, leader change): the client retries
            if p not in starts or offset < starts[p]:
                continue  # fetched for an earlier assignment
            bounds = todo.get(p)
            if bounds is None or offset >= bounds[1]:
                self._held.setdefault(p, []).append(msg)  # the next range's
                if bounds is not None:
                    del todo[p]
                continue
            out.append(msg)
            if offset >= bounds[1] - 1:
                del todo[p]
        return out

    def _take_held(self, todo: dict[int, tuple[int, int]], starts: Mapping[int, int]) -> list[Any]:
        """Held records inside ``todo``'s ranges; partitions they complete leave ``todo``."""
        out: list[Any] = []
        for p in list(todo):
            held = self._held.pop(p, None)
            if held:
                out.extend(self._sort(held, todo, starts))
        return out

    def _assign(self, starts: Mapping[int, int]) -> None:
        self.client.assign([TopicPartition(self.topic, p, o) for p, o in starts.items()])
        self._held, self._eof = {}, {}

    def reset(self) -> None:
        """Forget the assignment: the next range re-assigns."""
        with contextlib.suppress(Exception):
            self.client.unassign()
        self._next, self._held, self._eof = {}, {}, {}


def _at(offset: int | None, start: int | None) -> int | None:
    """The offset an out-of-range event names, else where the range started."""
    return offset if offset is not None and offset >= 0 else start
