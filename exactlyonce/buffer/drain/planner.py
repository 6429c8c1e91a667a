"""Chunk planning: which offsets the next chunk reads, and reading the one after it ahead.

A chunk runs from the stored positions toward the latest head's frontier, about
``batch_size`` records in all, split evenly over the partitions with work. A buffer message
may be a frame of many records, so the offsets per chunk follow what the last chunk held per
offset. While the sink writes one chunk, the next is read in a background thread (the
prefetch); it is used only if it starts exactly where the positions are then.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor

from exactlyonce.connectors.base.drain import Chunk

Plan = tuple[dict[int, int], dict[int, int]]  # (starts, ends) per partition
Read = Callable[[dict[int, int], dict[int, int]], Chunk]


def plan(
    positions: Mapping[int, int],
    frontier: Mapping[int, int],
    batch_size: int,
    records_per_offset: float,
) -> Plan | None:
    """Offset ranges of the next chunk: from the positions toward the frontier; None when
    every partition is there."""
    todo = {
        p: (positions.get(p, 0), end)
        for p, end in sorted(frontier.items())
        if positions.get(p, 0) < end
    }
    if not todo:
        return None
    # Offsets to read for about batch_size records: a frame holds up to
    # frame_records of them; what the last chunk held per offset is the estimate.
    share = max(1, int(batch_size / records_per_offset) // len(todo))
    starts = {p: s for p, (s, _) in todo.items()}
    ends = {p: min(end, s + share) for p, (s, end) in todo.items()}
    return starts, ends


class ChunkPlanner:
    """Plans the drainer's chunks and reads one ahead with ``read`` (in its own thread).

    Not thread-safe: the drainer's loop calls it. :meth:`cancel_prefetch` after anything that
    may move the positions other than the chunk that was handed out (a failure, a reset).
    """

    def __init__(self, read: Read, batch_size: int, records_per_offset: float, name: str) -> None:
        self.read = read
        self.batch_size = batch_size
        self.records_per_offset = records_per_offset  # until a chunk says
        self.name = name
        self._pool: ThreadPoolExecutor | None = None
        self._prefetch: Future[Chunk] | None = None

    def plan(self, positions: Mapping[int, int], frontier: Mapping[int, int]) -> Plan | None:
        return plan(positions, frontier, self.batch_size, self.records_per_offset)

    def next_chunk(self, positions: Mapping[int, int], frontier: Mapping[int, int]) -> Chunk | None:
        """The next chunk: the prefetched one if it starts where we are, else read now; then
        prefetch the one after it (reading overlaps the sink's work on this one)."""
        planned = self.plan(positions, frontier)
        if planned is None:
            self.cancel_prefetch()
            return None
        starts, ends = planned
        chunk: Chunk | None = None
        if self._prefetch is not None:
            future, self._prefetch = self._prefetch, None
            got = future.result()  # a failed read raises here, like a direct one
            if got.starts == starts:
                chunk = got
        if chunk is None:
            chunk = self.read(starts, ends)
        if chunk.offsets:
            self.records_per_offset = max(1.0, chunk.read / chunk.offsets)
        follow = self.plan({**positions, **chunk.ends}, frontier)
        if follow is not None:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(1, thread_name_prefix=f"{self.name}-read")
            self._prefetch = self._pool.submit(self.read, *follow)
        return chunk

    def cancel_prefetch(self) -> None:
        """Drop the chunk read ahead (waiting for its read to end; its errors are dropped)."""
        future, self._prefetch = self._prefetch, None
        if future is not None:
            with contextlib.suppress(Exception):
                future.result()

    def close(self) -> None:
        """Cancel the prefetch and stop the reading thread. Safe to call twice."""
        self.cancel_prefetch()
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None
