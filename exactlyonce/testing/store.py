"""The in-memory destination of :class:`~exactlyonce.testing.sink.MemorySink`.

A :class:`MemoryStore` holds what a database would: tables of rows, the heads, the
shard-commit markers and the dead letters. It outlives sink objects, so a "restart" is a new
sink on the same store, and it counts every row a task tried to write, committed or not (a
unique key hides a double write; the counter does not).

:class:`MemoryHeadStore` keeps one (query, sink)'s head there, with the obligations of
:class:`~exactlyonce.connectors.base.head.HeadStore`. One lock makes each method one atomic,
durable step: it is "durable" the moment it returns, as the store lives as long as the test.

:class:`FileStore` is the same store kept in one file, for Spark: every process on this
machine that opens the path (Spark's Python workers, a drainer, an auditor) sees one store,
each method still one atomic step (an exclusive ``flock`` around read, change, replace).
"""

from __future__ import annotations

import fcntl
import os
import pickle
import threading
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import TracebackType
from typing import Any

from exactlyonce.connectors.base import NO_EPOCH, DeadLetter, Head
from exactlyonce.errors import ExactlyOnceError, OffsetsMovedError

Key = tuple[str, str]  # (query_name, sink_name)
DrainKey = tuple[str, str, str]  # (query_name, sink_name, buffer topic)


class ShardCommittedError(ExactlyOnceError):
    """A task tried to commit a shard another attempt committed since the task opened.

    PostgreSQL refuses the same with the shard-commit table's primary key; the task fails,
    nothing of it becomes visible, and its retry finds the shard committed and skips it.
    """


@dataclass
class MemoryTable:
    """A table's rows, in commit order. ``unique_on`` names a column with a unique index."""

    rows: list[dict[str, Any]] = field(default_factory=list)
    unique_on: str | None = None
    _keys: set[Any] = field(default_factory=set)

    def insert(self, rows: Iterable[dict[str, Any]]) -> int:
        """Append rows; with a unique index, a row whose key is there is skipped (ON
        CONFLICT DO NOTHING). The number inserted."""
        inserted = 0
        for row in rows:
            if self.unique_on is not None:
                key = row.get(self.unique_on)
                if key in self._keys:
                    continue
                self._keys.add(key)
            self.rows.append(dict(row))
            inserted += 1
        return inserted


class MemoryStore:
    """Tables, heads, shard commits and dead letters, shared by every sink built on it.

    In-process only: pickling it (as Spark would, to ship a task to an executor) is refused.
    """

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.tables: dict[str, MemoryTable] = {}
        self.heads: dict[Key, Head] = {}
        self.shard_commits: dict[Key, dict[int, set[int]]] = {}
        self.dead_letters: dict[str, list[DeadLetter]] = {}
        self.write_attempts: Counter[str] = Counter()  # record ID -> rows tasks tried to write
        self.commits = 0  # task commits that made something durable
        # record ID -> rows committed steps tried to write (a unique index skipping some):
        # what a BEFORE INSERT trigger counts in PostgreSQL
        self.committed_writes: Counter[str] = Counter()
        self.drain_offsets: dict[DrainKey, dict[int, int]] = {}  # the buffer's drainer's
        self.id_columns: dict[str, str] = {}  # table -> its record ID column

    def __reduce__(self) -> Any:
        raise TypeError(
            "MemoryStore lives in one process and cannot be shipped to Spark executors; "
            "run the tasks in-process (see exactlyonce.testing)"
        )

    # -- tables ------------------------------------------------------------------------

    def create_table(
        self, name: str, unique_on: str | None, id_column: str | None = None
    ) -> MemoryTable:
        """The table ``name``, created (with a unique index on ``unique_on``) if missing;
        ``id_column`` names the record ID that :attr:`committed_writes` counts."""
        with self.lock:
            if id_column is not None:
                self.id_columns.setdefault(name, id_column)
            return self.tables.setdefault(name, MemoryTable(unique_on=unique_on))

    def rows(self, table: str) -> list[dict[str, Any]]:
        """A copy of the table's committed rows (empty if there is no such table)."""
        with self.lock:
            return [dict(r) for r in self.tables.get(table, MemoryTable()).rows]

    def count_attempts(self, record_ids: Iterable[str | None]) -> None:
        with self.lock:
            self.write_attempts.update(i for i in record_ids if i is not None)

    # -- shard commits -----------------------------------------------------------------

    def committed_shards(self, key: Key, epoch: int) -> set[int]:
        """The shards of ``epoch`` committed for (query, sink), as the store has them now."""
        with self.lock:
            return set(self.shard_commits.get(key, {}).get(epoch, set()))

    def commit(
        self,
        key: Key,
        epoch: int,
        table: str,
        rows: Sequence[dict[str, Any]],
        letters: Sequence[DeadLetter],
        new_shards: Sequence[int],
    ) -> int:
        """One atomic step: the rows, the dead letters and the shard markers, or nothing.

        Refuses (:class:`ShardCommittedError`, nothing written) when one of ``new_shards`` is
        committed already. Returns the number of rows inserted (a unique index skips some).
        """
        with self.lock:
            done = self.shard_commits.setdefault(key, {}).setdefault(epoch, set())
            again = sorted(set(new_shards) & done)
            if again:
                raise ShardCommittedError(f"{key} epoch {epoch}: shard(s) {again} committed")
            inserted = self._insert(table, rows)
            self.dead_letters.setdefault(table, []).extend(letters)
            done.update(new_shards)
            self.commits += 1
            return inserted

    def _insert(self, table: str, rows: Sequence[dict[str, Any]]) -> int:
        """Insert in a committing step: every row counted in :attr:`committed_writes`."""
        id_column = self.id_columns.get(table)
        if id_column is not None:
            self.committed_writes.update(str(r[id_column]) for r in rows if r.get(id_column))
        return self.tables[table].insert(rows)

    # -- the buffer's drain offsets -----------------------------------------------------

    def stored_offsets(self, key: DrainKey) -> dict[int, int]:
        """The drain offsets of (query, sink, topic): partition -> next offset to drain."""
        with self.lock:
            return dict(self.drain_offsets.get(key, {}))

    def forget_offsets(self, key: DrainKey) -> int:
        """Forget the drain offsets of (query, sink, topic); how many partitions had one."""
        with self.lock:
            return len(self.drain_offsets.pop(key, {}))

    def commit_drained(
        self,
        key: DrainKey,
        held: Mapping[int, int],
        new: Mapping[int, int],
        table: str,
        rows: Sequence[dict[str, Any]],
    ) -> int:
        """One atomic step: the drained rows and the new offsets of ``new``'s partitions,
        only if the stored offsets of those partitions are still ``held`` (else
        :class:`~exactlyonce.errors.OffsetsMovedError`, nothing written). Returns the
        number of rows inserted (a unique index skips some)."""
        with self.lock:
            stored = self.drain_offsets.setdefault(key, {})
            now = {p: stored[p] for p in new if p in stored}
            if now != {p: o for p, o in held.items() if p in new}:
                raise OffsetsMovedError(f"{key}: drain offsets {now}, this drainer held {held}")
            inserted = self._insert(table, rows)
            stored.update(new)
            self.commits += 1
            return inserted


class MemoryHeadStore:
    """One (query, sink)'s head in a :class:`MemoryStore`: a
    :class:`~exactlyonce.connectors.base.head.HeadStore`. Called by the driver only."""

    def __init__(self, store: MemoryStore, query_name: str, sink_name: str) -> None:
        self.store = store
        self.key: Key = (query_name, sink_name)

    def read_head(self) -> Head | None:
        """The head as the store has it now; None before the query's first epoch."""
        with self.store.lock:
            return self.store.heads.get(self.key)

    def create_head(self, head: Head) -> None:
        """Create the head if there is none; an existing head is left as it is."""
        with self.store.lock:
            self.store.heads.setdefault(self.key, head)

    def bind_query_id(self, spark_query_id: str) -> None:
        """Record the Spark query id on a head that has none; never replaces one."""
        with self.store.lock:
            head = self.store.heads.get(self.key)
            if head is not None and head.spark_query_id is None:
                self.store.heads[self.key] = replace(head, spark_query_id=spark_query_id)

    def advance_head(self, epoch: int, spark_query_id: str | None) -> None:
        """Move the head up to ``epoch`` (never down), and in the same step drop the shard
        commits at or below ``epoch``. Idempotent; a missing head stays missing."""
        with self.store.lock:
            head = self.store.heads.get(self.key)
            if head is not None and head.epoch < epoch:
                query_id = spark_query_id or head.spark_query_id
                self.store.heads[self.key] = Head(epoch, query_id, head.num_shards)
            commits = self.store.shard_commits.get(self.key, {})
            for done in [e for e in commits if e <= epoch]:
                del commits[done]

    def rewind_head(self, epoch: int) -> None:
        """Move the head back to ``epoch`` with its Spark query id cleared (never forward),
        and drop the shard commits above it. Idempotent; a missing head stays missing."""
        with self.store.lock:
            head = self.store.heads.get(self.key)
            if head is not None and head.epoch > epoch:
                self.store.heads[self.key] = Head(epoch, None, head.num_shards)
            commits = self.store.shard_commits.get(self.key, {})
            for above in [e for e in commits if e > epoch]:
                del commits[above]

    def reset_head(self) -> None:
        """Forget the head and the shard commits (not the rows): a deliberate fresh start."""
        with self.store.lock:
            self.store.heads.pop(self.key, None)
            self.store.shard_commits.pop(self.key, None)

    @property
    def epoch(self) -> int:
        """The head's epoch now, ``NO_EPOCH`` before the first."""
        head = self.read_head()
        return NO_EPOCH if head is None else head.epoch


class FileStore(MemoryStore):
    """A :class:`MemoryStore` kept in the file ``path``: one store for every process on this
    machine that opens it, so Spark's Python workers, a drainer and an auditor share it.

    Each method stays one atomic step: under an exclusive ``flock`` of ``<path>.lock`` the
    store is read from the file, changed, and written back with an atomic rename; a step
    that raises writes nothing back (as a rolled-back transaction). It pickles as its path.
    Meant for tests of a few thousand records: every step reads and writes the whole store.
    """

    STATE = (
        "tables",
        "heads",
        "shard_commits",
        "dead_letters",
        "write_attempts",
        "commits",
        "drain_offsets",
        "committed_writes",
        "id_columns",
    )

    def __init__(self, path: str | os.PathLike[str]) -> None:
        super().__init__()
        self.path = Path(path).absolute()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.lock = _FileLock(self)  # type: ignore[assignment]
        with self.lock:  # the file's state now (read attributes under the lock to be current)
            pass

    def __reduce__(self) -> Any:
        return (FileStore, (str(self.path),))

    def load(self) -> None:
        """Take the store's state from the file (an absent file is an empty store)."""
        if self.path.exists():
            state = pickle.loads(self.path.read_bytes())  # noqa: S301 - our own file
            self.__dict__.update(state)

    def save(self) -> None:
        """Write the store's state to the file in one rename (readers see old or new)."""
        tmp = self.path.with_name(f"{self.path.name}.{os.getpid()}.tmp")
        tmp.write_bytes(pickle.dumps({name: getattr(self, name) for name in self.STATE}))
        os.replace(tmp, self.path)


class _FileLock:
    """Re-entrant in a process, exclusive across processes: the outermost ``with`` takes the
    ``flock`` and loads the store; leaving it without an error saves the store."""

    def __init__(self, store: FileStore) -> None:
        self.store = store
        self.thread = threading.RLock()
        self.depth = 0
        self.file: Any = None

    def __enter__(self) -> _FileLock:
        self.thread.acquire()
        if self.depth == 0:
            self.file = open(f"{self.store.path}.lock", "a+b")  # noqa: SIM115 - held across
            fcntl.flock(self.file, fcntl.LOCK_EX)
            self.store.load()
        self.depth += 1
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self.depth -= 1
        try:
            if self.depth == 0:
                try:
                    if kind is None:
                        self.store.save()
                finally:
                    fcntl.flock(self.file, fcntl.LOCK_UN)
                    self.file.close()
                    self.file = None
        finally:
            self.thread.release()
