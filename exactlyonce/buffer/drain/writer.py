"""Writing a chunk: each writer's share in its own sink transaction, in parallel.

Of a drainer member's partitions, writer ``w`` of ``k`` owns ``p // members % k == w``: its
rows, its dead letters and its partitions' offsets go to its own PostgreSQL connection in one
transaction (:class:`~exactlyonce.buffer.drain.postgres_target.PgDrainTarget`), so writers
commit side by side, each atomically. A share that committed stays committed when another
fails: the positions move for its partitions only, and the failed share is read again.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from exactlyonce.buffer.drain.chunk import Chunk
from exactlyonce.buffer.drain.dead_letters import Letter
from exactlyonce.buffer.drain.postgres_target import PgDrainTarget
from exactlyonce.connectors.kafka.reader import where_of
from exactlyonce.faults import crash_point

Counts = tuple[int, int, int]  # written, duplicates, dead letters


class ChunkWriter:
    """Writes chunks through ``targets`` (one per writer), dead-lettering with
    ``dead_letter`` (called before a share commits; it must raise if it did not write)."""

    def __init__(
        self,
        targets: list[PgDrainTarget],
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
        jobs = [
            w
            for w, target in enumerate(self.targets)
            if w in rows
            or w in bad
            or any(target.owns(p) and positions.get(p) != e for p, e in chunk.ends.items())
        ]
        results = self._run_shares(jobs, _Share(self.chunks, rows, bad, chunk, positions))
        written = sum(r[0] for r in results)
        return written, sum(r[1] for r in results), sum(r[2] for r in results)

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

    def _run_shares(self, jobs: list[int], share: _Share) -> list[Counts]:
        if len(jobs) == 1:
            return [self._write_share(jobs[0], share)]
        if self._pool is None:
            self._pool = ThreadPoolExecutor(
                len(self.targets), thread_name_prefix=f"{self.name}-write"
            )
        futures = [self._pool.submit(self._write_share, w, share) for w in jobs]
        results, failure = [], None
        for future in futures:  # wait for all: a share that committed is kept
            try:
                results.append(future.result())
            except BaseException as exc:
                failure = failure or exc
        if failure is not None:
            raise failure
        return results

    def _write_share(self, w: int, share: _Share) -> Counts:
        """Writer ``w``'s rows, dead letters and offsets in one transaction; rolled back on
        any failure (nothing of the share is then in the sink, and the positions stay)."""
        target, chunk, positions = self.targets[w], share.chunk, share.positions
        crash_point("drain_before_write", share.n)
        try:
            target.begin()
            written, duplicates, letters = self._insert(target, share.rows.get(w, []), chunk)
            crash_point("drain_mid_write", share.n)
            letters = share.bad.get(w, []) + letters
            if letters:
                self.dead_letter(letters)
            target.commit({**positions, **chunk.ends})
        except BaseException:
            target.rollback()
            raise
        crash_point("drain_after_commit", share.n)
        positions.update({p: e for p, e in chunk.ends.items() if target.owns(p)})
        return written, duplicates, len(letters)

    def _insert(
        self, target: PgDrainTarget, where: list[int], chunk: Chunk
    ) -> tuple[int, int, list[Letter]]:
        """Write the records at ``where``: COPY when the fast path holds, else the exact path.
        Returns (written, duplicates, dead letters)."""
        if not where:
            return 0, 0, []
        # In the writer's thread: Arrow works without the GIL, and the reader is the busier.
        counts = [chunk.counts[i] for i in where]
        data = target.csv(
            [chunk.ids[i] for i in where],
            [chunk.epochs[i] for i in where],
            [chunk.values[i] for i in where],
            counts,
        )
        if data is not None and target.copy(data):
            return sum(counts), 0, []
        rows, letters = chunk.rows_of(where)
        result = target.insert(rows)
        letters += [(r.source, f"refused by the sink: {why}") for r, why in result.refused]
        return result.written, result.duplicates, letters

    def close(self) -> None:
        """Stop the writers' threads (waiting for a share in flight). Safe to call twice."""
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None


class _Share:
    """What every writer of one chunk works from."""

    __slots__ = ("n", "rows", "bad", "chunk", "positions")

    def __init__(
        self,
        n: int,
        rows: dict[int, list[int]],
        bad: dict[int, list[Letter]],
        chunk: Chunk,
        positions: dict[int, int],
    ) -> None:
        self.n, self.rows, self.bad, self.chunk, self.positions = n, rows, bad, chunk, positions


__all__ = ["ChunkWriter", "Counts"]
