"""Where the drainer is: the positions (partition -> next offset) stored in the sink.

Kafka Connect's ``SinkTaskContext.offset()`` pattern: the sink holds the drainer's offsets,
written with the records as each target says (:mod:`exactlyonce.connectors.base.drain`: in the
same atomic step, or after the records were written idempotently), and read back on every
(re)start and after every failure, so a commit whose reply was lost is
seen there, never assumed failed.

Guarantee: the drainer never skips a record that expired before it was drained (DESIGN
invariant 13). On every (re)start and after every failure, :func:`check_positions` compares
where each of the drainer's partitions must be read from with where the partition starts now
(its first record, exactly: :func:`~exactlyonce.connectors.kafka.reader.log_start_offset`):

- a partition drained before must be read from its stored offset;
- a partition never drained must be read from where the query's records begin: the head's
  ``origin`` (where the partition ended when the buffered query's head was created, before
  any of its records; 0 for a partition created later). A head written before origins were
  kept leaves 0: the check then fails closed, never open. With no head at all the query has
  written nothing yet, so nothing of it can have expired.

If the partition starts above that offset, the records in between are gone: the drain stops
with :class:`~exactlyonce.errors.ExpiredRecordsError` naming the topic, the partition and the
lost range, having written nothing of that partition past it. Records that expire while the
drainer runs are caught by its reader (``auto.offset.reset=error``: the fetch fails instead of
jumping to the new start), and the check runs again after the failure. Records below the
origin are not this query's (an earlier life of the topic): a never-drained partition whose
start lies there is read from its start.

Going on without the lost records is explicit: :func:`reset_positions` forgets the stored
offsets and :func:`start_here` stores each partition's current start, so the next run begins
there knowingly.

Stored offsets beyond a partition's end (the topic was re-created) stop the drainer too.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from exactlyonce.connectors.base.drain import Chunk, DrainTarget, Letter, Share
from exactlyonce.connectors.kafka.reader import exact_end_offsets, log_start_offset
from exactlyonce.errors import ConfigError, ExpiredRecordsError

_RESET_HINT = (
    "Run `exactlyonce drain --reset-offsets` (or Drainer.reset_offsets()) if you mean to start over"
)
_EXPIRED_HINT = (
    "They are lost to the sink; to go on without them knowingly, run `exactlyonce drain "
    "--reset-offsets` (or Drainer.reset_offsets()): each partition is then drained from where "
    "it starts now"
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
    origin: Mapping[int, int] | None,
    timeout_s: float,
) -> dict[int, int]:
    """Where each of ``partitions`` (the drainer's own) is read from: its stored offset in
    ``positions``, or for a partition never drained, its current start if that is above 0
    (else it is left out: read from 0). Raises :class:`ExpiredRecordsError` when records
    between that offset (a never-drained partition's: its ``origin``, 0 where it names none)
    and the partition's start expired, and :class:`ConfigError` for stored offsets of a
    partition the topic lacks or past a partition's end. ``origin`` None: no head yet (the
    query wrote nothing), a never-drained partition is read from its start."""
    _refuse_unknown_partitions(topic, partitions, positions)
    starts = dict(positions)
    for p in sorted(partitions):
        low = log_start_offset(client, topic, p, timeout_s)
        if p in positions:
            _check_stored(client, topic, p, positions[p], low, frontier, timeout_s)
        elif low > 0:
            expected = low if origin is None else origin.get(p, 0)
            if low > expected:
                raise expired(topic, p, expected, low, "before the partition was first drained")
            starts[p] = low
    return starts


def _refuse_unknown_partitions(
    topic: str, partitions: Sequence[int], positions: Mapping[int, int]
) -> None:
    for p in sorted(set(positions) - set(partitions)):
        raise ConfigError(
            "buffer.topic",
            f"the sink holds drain offsets for partition {p} of {topic!r}, which "
            f"has no such partition: the topic was re-created. {_RESET_HINT}",
        )


def _check_stored(
    client: Any,
    topic: str,
    p: int,
    offset: int,
    low: int,
    frontier: Mapping[int, int],
    timeout_s: float,
) -> None:
    """A stored offset lies inside what the partition holds: not past its end (exact: some
    brokers' ListOffsets answers lie below the end, Tansu), not below its start."""
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
        raise expired(topic, p, offset, low, f"before the drainer reached them (it is at {offset})")


def expired(topic: str, p: int, first: int, low: int, when: str) -> ExpiredRecordsError:
    """The error for records ``first..low-1`` of ``topic[p]``, gone before they were
    drained (``when`` says since when the drainer expected them)."""
    return ExpiredRecordsError(
        topic,
        p,
        first,
        low - 1,
        f"records {first}..{low - 1} of {topic}[{p}] expired {when}: the partition now "
        f"starts at {low} (the topic's retention is shorter than the drainer's lag). "
        f"{_EXPIRED_HINT}",
    )


def reset_positions(targets: Sequence[DrainTarget]) -> int:
    """Forget the stored offsets (not the data) of the query's buffer; returns how many
    partitions' offsets went. Every target's ``held`` is emptied: the next run starts at the
    topic's start (see :func:`start_here`)."""
    first = targets[0]
    first.ensure()
    n = first.reset_offsets()
    for target in targets:
        target.held = {}
    return n


def current_starts(
    client: Any, topic: str, partitions: Sequence[int], timeout_s: float
) -> dict[int, int]:
    """Each partition's current start, for the partitions that start above 0."""
    starts = {p: log_start_offset(client, topic, p, timeout_s) for p in partitions}
    return {p: s for p, s in starts.items() if s > 0}


def start_here(target: DrainTarget, starts: Mapping[int, int]) -> None:
    """Store ``starts`` as the drain offsets, after :func:`reset_positions`: one step of
    ``target`` (a target owning every partition) with offsets and no record, so the next run
    begins there knowingly, not refused for records that expired below them."""
    if not starts:
        return
    target.ensure()
    target.read_offsets()  # held: what is stored now (nothing, after the reset)
    chunk = Chunk(starts={}, ends=dict(starts))
    target.write_share(Share(0, chunk, [], [], {}, chunk.ends, _no_letters))


def _no_letters(letters: list[Letter]) -> None:
    assert not letters, "an offsets-only step has no records"
