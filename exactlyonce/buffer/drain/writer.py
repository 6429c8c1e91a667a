"""Writing a chunk: each writer's share through its own drain target, in parallel.

Of a drainer member's partitions, writer ``w`` of ``k`` owns ``p // members % k == w``: its
records, its dead letters and its partitions' offsets go to its own target (one connection)
in one step (:meth:`~exactlyonce.connectors.base.drain.DrainTarget.write_share`: atomic, or
idempotent then offsets, as the target says), so writers commit side by side. A share that
committed stays committed when another fails: the positions move for its partitions only, and
the failed share is read again. Which sink it is, and how it writes, is the target's business.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from exactlyonce.connectors.base.drain import Chunk, Counts, DrainTarget, Letter, Share
from exactlyonce.connectors.kafka.reader import where_of
from exactlyonce.faults import crash_point


class ChunkWriter:
    """Writes chunks through ``targets`` (one per writer), dead-lettering with
    ``dead_letter`` (called before a share's offsets are stored; it must raise if it did not
    write)."""

    def __init__(
        self,
        targets: list[DrainTarget],
        members: int,
        name: str,
        dead_letter: Callable[[list[Letter]], None],
    ) -> None:
        self.targets = targets
        self.members = members
        self.name = name
        self.dead_letter = dead_letter
        self.chunks = 0  # chunks written so far (the crash points' count)
        self._pool: ThreadPoolExecutor | None = None

    def write(self, chunk: Chunk, positions: dict[int, int]) -> Counts:
        """Write ``chunk`` from ``positions``; on each share's commit, its partitions'
        positions move to the chunk's ends (in place). Returns the summed counts; raises the
        first share's failure after every share has finished."""
        self.chunks += 1
        rows = self._by_writer(chunk.partitions)
        bad: dict[int, list[Letter]] = {}
        for msg, why in chunk.bad:
            bad.setdefault(self._writer_of(where_of(msg)[1]), []).append((msg, why))
        shares = [
            (w, self._share(chunk, rows.get(w, []), bad.get(w, []), positions))
            for w, target in enumerate(self.targets)
            if w in rows
            or w in bad
            or any(target.owns(p) and positions.get(p) != e for p, e in chunk.ends.items())
        ]
        results = self._run_shares(shares, positions)
        written = sum(r[0] for r in results)
        return written, sum(r[1] for r in results), sum(r[2] for r in results)

    def _share(
        self, chunk: Chunk, where: list[int], bad: list[Letter], positions: dict[int, int]
    ) -> Share:
        return Share(self.chunks, chunk, where, bad, dict(positions), chunk.ends, self.dead_letter)

    def _writer_of(self, partition: int) -> int:
        return partition // self.members % len(self.targets)

    def _by_writer(self, partitions: list[int]) -> dict[int, list[int]]:
        """Positions in the chunk of each writer's records."""
        n = len(self.targets)
        if n == 1:
            return {0: list(range(len(partitions)))} if partitions else {}
        out: dict[int, list[int]] = {}
        members = self.members
        for i, p in enumerate(partitions):  # _writer_of, inline: this runs once per record
            out.setdefault(p // members % n, []).append(i)
        return out

    def _run_shares(self, shares: list[tuple[int, Share]], positions: dict[int, int]) -> list[Any]:
        if len(shares) == 1:
            return [self._write_share(*shares[0], positions)]
        if self._pool is None:
            self._pool = ThreadPoolExecutor(
                len(self.targets), thread_name_prefix=f"{self.name}-write"
            )
        futures = [self._pool.submit(self._write_share, w, s, positions) for w, s in shares]
        results, failure = [], None
        for future in futures:  # wait for all: a share that committed is kept
            try:
                results.append(future.result())
            except BaseException as exc:
                failure = failure or exc
        if failure is not None:
            raise failure
        return results

    def _write_share(self, w: int, share: Share, positions: dict[int, int]) -> Counts:
        """Writer ``w``'s share in one step of its target; on success its partitions'
        positions move (nothing of a failed share's offsets moved)."""
        target = self.targets[w]
        crash_point("drain_before_write", share.n)
        counts = target.write_share(share)
        crash_point("drain_after_commit", share.n)
        positions.update({p: e for p, e in share.ends.items() if target.owns(p)})
        return counts

    def close(self) -> None:
        """Stop the writers' threads (waiting for a share in flight). Safe to call twice."""
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None


__all__ = ["ChunkWriter", "Counts"]
