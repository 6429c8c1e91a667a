"""Source frontiers for Spark Real-time Mode: which pending rows a commit may take.

Pure bookkeeping, no I/O (the writer in :mod:`.realtime` does the I/O). Per source partition
(``(topic, partition)``) it keeps the *frontier*, the next source offset to write, as the
sink last said or as this writer last committed it, and the rows that wait for a commit.

- A row whose offset is below the frontier was committed by an earlier attempt: skipped
  and counted (a re-run epoch, a restart from a checkpoint, a deleted checkpoint).
- A commit takes rows at source-offset boundaries only (DESIGN invariant 15): with
  ``rows_per_source_record="one"`` every pending row is a whole source record; with
  ``"many"`` (explode, flatMap) a mid-epoch commit leaves the rows of each partition's
  highest pending offset for later, since more of them may still come; the epoch's end
  (``final``) takes them all.
- Rows of one source partition must arrive in increasing offset order: a decreasing offset
  means a shuffle between source and sink, and is refused (so is a second row of one offset
  under ``"one"``).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, get_args

from exactlyonce.errors import ConfigError, FrontierMovedError

RowsPerRecord = Literal["one", "many"]
ROWS_PER_RECORD: tuple[RowsPerRecord, ...] = get_args(RowsPerRecord)
# A source partition: (topic, partition).
SourceKey = tuple[str, int]


def source_record_id(topic: str, partition: int, offset: int, n: int | None = None) -> str:
    """A record ID (32 hex digits) from source coordinates: the MD5 of
    ``topic|partition|offset``, and ``|n`` for the n-th row of a source record with many."""
    text = f"{topic}|{partition}|{offset}" + ("" if n is None else f"|{n}")
    return hashlib.md5(text.encode("utf-8")).hexdigest()


@dataclass
class Chunk:
    """Rows one commit writes: ``expected`` is each partition's frontier as this writer
    knows it (None: no frontier stored yet), which the sink must still hold when it commits;
    ``next_offsets`` are the frontiers the commit stores; ``taken`` the same rows with their
    source offsets, per partition (for :meth:`SourceTracker.correct`)."""

    rows: list[Any]
    expected: dict[SourceKey, int | None]
    next_offsets: dict[SourceKey, int]
    taken: dict[SourceKey, list[tuple[int, Any]]] = field(repr=False)


@dataclass
class _Partition:
    frontier: int | None  # the next offset to write; None: nothing stored
    last_seen: int | None = None
    pending: list[tuple[int, Any]] = field(default_factory=list)


class SourceTracker:
    """One writer's frontiers and pending rows, per source partition."""

    def __init__(self, rows_per_source_record: RowsPerRecord = "one") -> None:
        if rows_per_source_record not in ROWS_PER_RECORD:
            raise ConfigError(
                "rows_per_source_record",
                f"must be one of {list(ROWS_PER_RECORD)}, got {rows_per_source_record!r}",
            )
        self.per_record = rows_per_source_record
        self.parts: dict[SourceKey, _Partition] = {}
        self.skipped = 0
        self.pending = 0

    def has_read(self, key: SourceKey) -> bool:
        return key in self.parts

    def read(self, key: SourceKey, frontier: int | None) -> None:
        """The frontier of ``key`` as the sink holds it, read before its first row."""
        self.parts[key] = _Partition(frontier)

    def frontier(self, key: SourceKey) -> int | None:
        return self.parts[key].frontier

    def add(self, key: SourceKey, offset: int, row: Any) -> bool:
        """Take a row of ``key`` at ``offset``: False when it is below the frontier (skipped).
        Raises ConfigError on an offset out of order."""
        part = self.parts.get(key)
        assert part is not None, f"read the frontier of {key} before its rows"
        self._check_order(key, part.last_seen, offset)
        part.last_seen = offset
        if part.frontier is not None and offset < part.frontier:
            self.skipped += 1
            return False
        part.pending.append((offset, row))
        self.pending += 1
        return True

    def _check_order(self, key: SourceKey, last: int | None, offset: int) -> None:
        if last is None or offset > last:
            return
        if offset == last and self.per_record == "many":
            return
        if offset == last:
            raise ConfigError(
                "rows_per_source_record",
                f"two rows come from source record {key[0]}[{key[1]}]@{offset}, but "
                "rows_per_source_record is 'one': a query that makes several rows of one "
                "record (explode, flatMap) needs rows_per_source_record='many', so that one "
                "record's rows are never split between two commits",
            )
        raise ConfigError(
            "source_columns",
            f"rows of source partition {key[0]}[{key[1]}] arrive out of order (offset {offset} "
            f"after {last}): the query has a shuffle (repartition, join, aggregation) between "
            "the Kafka source and the sink, so a commit could not stand for a prefix of the "
            "partition. Real-time Mode writes need the source's rows in their source order",
        )

    def take(self, final: bool) -> Chunk | None:
        """The rows a commit may write now (``final``: at the epoch's end), or None. They
        leave the pending rows; the frontiers move only by :meth:`committed`."""
        taken_by_key: dict[SourceKey, list[tuple[int, Any]]] = {}
        for key, part in self.parts.items():
            cut = len(part.pending)
            if not final and self.per_record == "many" and part.pending:
                top = part.pending[-1][0]
                while cut and part.pending[cut - 1][0] == top:
                    cut -= 1
            if not cut:
                continue
            taken_by_key[key], part.pending = part.pending[:cut], part.pending[cut:]
        chunk = self._chunk(taken_by_key)
        if chunk is not None:
            self.pending -= len(chunk.rows)
        return chunk

    def _chunk(self, taken: dict[SourceKey, list[tuple[int, Any]]]) -> Chunk | None:
        if not taken:
            return None
        rows = [row for pairs in taken.values() for _, row in pairs]
        expected = {key: self.parts[key].frontier for key in taken}
        next_offsets = {key: pairs[-1][0] + 1 for key, pairs in taken.items()}
        return Chunk(rows, expected, next_offsets, taken)

    def correct(self, chunk: Chunk, frontiers: Mapping[SourceKey, int | None]) -> Chunk | None:
        """``chunk`` (taken, not committed) against the frontiers the sink holds now for some
        of its partitions, when they differ from what it was taken against (a store that
        trusted a frontier unread: StaleFrontier). Each such partition takes the sink's
        frontier; its rows below it, in the chunk and pending, are skipped and counted. The
        rest, to commit against the new frontiers, or None. A frontier below the one a chunk
        expects is refused: frontiers only grow, so the sink lost some."""
        taken: dict[SourceKey, list[tuple[int, Any]]] = {}
        for key, pairs in chunk.taken.items():
            if key not in frontiers:
                taken[key] = pairs
                continue
            frontier, known = frontiers[key], chunk.expected[key]
            if known is not None and (frontier is None or frontier < known):
                raise FrontierMovedError(
                    f"source partition {key[0]}[{key[1]}]: the sink's frontier {frontier} is "
                    f"below {known}, which it held before: its stored frontiers were lost"
                )
            part = self.parts[key]
            part.frontier = frontier
            kept = [pair for pair in pairs if frontier is None or pair[0] >= frontier]
            pending = [pair for pair in part.pending if frontier is None or pair[0] >= frontier]
            dropped = len(pairs) - len(kept) + len(part.pending) - len(pending)
            self.skipped += dropped
            self.pending -= len(part.pending) - len(pending)
            part.pending = pending
            if kept:
                taken[key] = kept
        return self._chunk(taken)

    def committed(self, chunk: Chunk) -> None:
        """``chunk`` is durably in the sink with its frontiers."""
        for key, offset in chunk.next_offsets.items():
            self.parts[key].frontier = offset


EARLIEST = -2  # Spark's startingOffsets JSON: the earliest offset of a partition


def starting_offsets(
    frontiers: Mapping[SourceKey, int], partitions: Mapping[str, Sequence[int]]
) -> dict[str, dict[str, int]]:
    """Spark's ``startingOffsets`` JSON (as a dict) that resumes a new checkpoint where the
    sink's frontiers stand: each partition at its frontier (the next offset to write), a
    partition with none at the earliest offset (nothing of it was written). ``partitions``:
    every partition of each subscribed topic, as the brokers list them (Spark wants them all).

    Fails closed: no frontier at all (the query never committed by frontier: resuming from
    it would re-read everything) and a frontier of a partition the topic no longer has are
    refused with ConfigError, never guessed."""
    if not frontiers:
        raise ConfigError(
            "--starting-offsets",
            "the sink holds no source frontiers for this query: it never committed in Real-time "
            "Mode, so there is no position to resume from",
        )
    unknown = sorted(k for k in frontiers if k[1] not in partitions.get(k[0], ()))
    if unknown:
        names = ", ".join(f"{t}[{p}]" for t, p in unknown)
        raise ConfigError(
            "--starting-offsets",
            f"the sink holds frontiers of {names}, which the brokers do not list: the topic "
            "changed since; pick the offsets by hand",
        )
    return {
        topic: {str(p): frontiers.get((topic, p), EARLIEST) for p in sorted(numbers)}
        for topic, numbers in sorted(partitions.items())
    }
