"""Where the drainer is: the positions (partition -> next offset) stored in the sink.

Kafka Connect's ``SinkTaskContext.offset()`` pattern: the sink holds the drainer's offsets,
written with the records as each target says (:mod:`exactlyonce.connectors.base.drain`: in the
same atomic step, or after the records were written idempotently), and read back on every
(re)start and after every failure, so a commit whose reply was lost is
seen there, never assumed failed. Stored offsets beyond a partition's end (the topic was
re-created) or below its start (records expired before they were drained) stop the drainer
with an error: it never skips silently.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from exactlyonce.connectors.base.drain import DrainTarget
from exactlyonce.connectors.kafka.reader import exact_end_offsets, log_start_offset
from exactlyonce.errors import ConfigError

_RESET_HINT = (
    "Run `exactlyonce drain --reset-offsets` (or Drainer.reset_offsets()) if you mean to start over"
)


def read_positions(targets: Sequence[DrainTarget], mine: Callable[[int], bool]) -> dict[int, int]:
    """The stored offsets of this drainer's partitions, as the sink holds them (each target
    keeps its own share as ``held``). Prepares each target first (``ensure``: the offsets
    table, indices...)."""
    stored: dict[int, int] = {}
    for target in targets:
        target.ensure()
        stored.update(target.read_offsets())
    return {p: o for p, o in stored.items() if mine(p)}


def check_positions(
    client: Any,
    topic: str,
    partitions: Sequence[int],
    positions: Mapping[int, int],
    frontier: Mapping[int, int],
    timeout_s: float,
) -> None:
    """Stored offsets must lie inside what the topic holds (DESIGN invariant 9's kind):
    raises :class:`ConfigError` for a partition the topic lacks, an offset past its end, or
    records that expired before they were drained."""
    parts = set(partitions)
    for p, offset in sorted(positions.items()):
        if p not in parts:
            raise ConfigError(
                "buffer.topic",
                f"the sink holds drain offsets for partition {p} of {topic!r}, which "
                f"has no such partition: the topic was re-created. {_RESET_HINT}",
            )
        # Exact: some brokers' ListOffsets answers lie below the end and above the
        # start (Tansu); a false "expired" would stop the drain for nothing.
        low = log_start_offset(client, topic, p, timeout_s)
        end = exact_end_offsets(client, topic, [p], timeout_s)[p]
        end = max(end, frontier.get(p, 0))
        if offset > end:
            raise ConfigError(
                "buffer.topic",
                f"the sink's drain offset {offset} of {topic}[{p}] is past the end of "
                f"the partition ({end}): the topic was re-created (or the broker lost its "
                f"data), and draining on would skip records. {_RESET_HINT}",
            )
        if offset < low:
            raise ConfigError(
                "buffer.topic",
                f"records {offset}..{low - 1} of {topic}[{p}] expired before they were "
                "drained (topic retention is shorter than the drainer's lag). They are "
                "lost to the sink; reset the drain offsets to go on knowingly",
            )


def reset_positions(targets: Sequence[DrainTarget]) -> int:
    """Forget the stored offsets (not the data) of the query's buffer; returns how many
    partitions' offsets went. Every target's ``held`` is emptied: the next run starts at the
    topic's start."""
    first = targets[0]
    first.ensure()
    n = first.reset_offsets()
    for target in targets:
        target.held = {}
    return n
