"""The executor-side half of the protocol, shared by every sink.

Spark runs one task per shard partition (through ``mapInArrow``); the task calls
:meth:`ShardTask.run`. For every Arrow batch it:

1. learns which shards of this epoch an earlier attempt already committed (asked once, from
   the sink, when the first row arrives: an empty partition never touches the sink) and drops
   their rows, keeping their IDs to re-mark in the catalog;
2. sends records with a null key to the dead-letter destination;
3. drops repeats and IDs the catalog holds (:class:`~exactlyonce.dedup.shard.TaskDedup`);
4. hands the rest to the sink's :meth:`_write_rows`.

At the end, :meth:`_commit` makes the rows and "(query, epoch, shard) committed" durable in one
atomic step; only then are the IDs marked in the catalog. A subclass says how to reach its
destination; it never re-implements these rules.

Not guaranteed: :meth:`close` runs on normal exit and on exceptions, not when the Python
worker is SIGKILLed; sinks rely on their server dropping an open transaction then.
"""

from __future__ import annotations

import enum
import functools
import hashlib
import os
import socket
from abc import ABC, abstractmethod
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Any, ClassVar, Generic, Protocol, TypeVar

import pyarrow as pa
import pyarrow.compute as pc

from exactlyonce.connectors.base.arrays import bools, int_values, ints_like
from exactlyonce.connectors.base.columns import (
    DELETE_COLUMN,
    ERROR_COLUMN,
    PAYLOAD_COLUMN,
    SHARD_COLUMN,
)
from exactlyonce.connectors.base.report import TaskResult
from exactlyonce.connectors.base.upsert import OnePerKey
from exactlyonce.dedup.bloom import ids_from_hex
from exactlyonce.dedup.shard import DedupPlan, TaskDedup
from exactlyonce.errors import TaskStateError
from exactlyonce.faults import crash_point


@dataclass(frozen=True)
class DeadLetter:
    """A record that cannot be written, with why. Goes to the sink's dead-letter destination."""

    epoch: int
    shard: int | None
    record_id: str | None
    error: str
    payload: str | None
    # Set on a path without shard markers (ShardWriter.write_unaligned): the letter's
    # identity, so that a re-run of the same Spark partition cannot write it twice.
    key: str | None = None


def writer_name() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


class TaskStatus(enum.Enum):
    """Where a :class:`ShardTask` is. ``NEW -> OPEN -> COMMITTED``; any error -> ``FAILED``;
    ``close()`` from any status -> ``CLOSED``. A task is used once."""

    NEW = "new"  # no row seen yet: the sink was not touched
    OPEN = "open"  # connected, inside the atomic step, rows being written
    COMMITTED = "committed"  # rows and shard markers are durable; IDs marked in the catalog
    FAILED = "failed"  # an error escaped: nothing more may be written or committed
    CLOSED = "closed"


TaskMethod = TypeVar("TaskMethod", bound=Callable[..., Any])


def allowed_in(*statuses: TaskStatus) -> Callable[[TaskMethod], TaskMethod]:
    """Refuse the call unless the task is in one of ``statuses``; on any error the task
    becomes FAILED and the error is re-raised (quix-streams' transaction guard)."""

    def decorate(method: TaskMethod) -> TaskMethod:
        @functools.wraps(method)
        def guarded(self: ShardTask, *args: Any, **kwargs: Any) -> Any:
            if self.state not in statuses:
                raise TaskStateError(
                    f"{type(self).__name__}.{method.__name__}() in status "
                    f"{self.state.value}; allowed: {[s.value for s in statuses]}"
                )
            try:
                return method(self, *args, **kwargs)
            except BaseException:
                self.state = TaskStatus.FAILED
                raise

        return guarded  # type: ignore[return-value]

    return decorate


class ShardTask(ABC):
    """One task's atomic write of its shard(s) for one epoch: a small state machine
    (:class:`TaskStatus`). Called by :class:`ShardWriter` in the executor, in this order:
    :meth:`write` per Arrow batch, :meth:`commit` once, :meth:`close` always."""

    def __init__(
        self,
        epoch: int,
        id_column: str,
        columns: Sequence[str],
        dedup: DedupPlan | None,
        *,
        upsert: bool = False,
    ) -> None:
        self.epoch = epoch
        self.id_column = id_column
        self.columns = list(columns)
        # mode="upsert": one row per ID (the within-epoch rule), written with its tombstone
        # flag (``_eo_delete``) under the sink's epoch guard; never with the catalog.
        self.one_per_key = OnePerKey(id_column) if upsert else None
        self.result = TaskResult(writer=writer_name())
        self.dedup = TaskDedup(dedup, epoch) if dedup is not None else None
        self.state = TaskStatus.NEW
        self.committed_before: set[int] = set()
        self.shards: set[int] = set()
        # False on a path whose tasks are not shard-aligned (the Spark data source, see
        # exactlyonce.integration.datasource): no marker is trusted or written, and every
        # record's write must be idempotent by its ID.
        self.shard_markers = True
        # With shard_markers False: the Spark partition, which keys each dead letter.
        self.letter_scope: int | None = None
        self._letter_counts: Counter[str] = Counter()

    # -- what a sink provides ------------------------------------------------------------

    @abstractmethod
    def _open(self) -> set[int]:
        """Connect, begin the atomic step, and return the shards of this epoch that an
        earlier attempt already committed (read from the sink itself, never a cache).
        Called once, when the first row arrives: an empty partition never touches the sink."""

    @abstractmethod
    def _write_rows(self, rows: pa.RecordBatch) -> None:
        """Write new records (only ``columns``) inside the open atomic step; update
        ``result.written``/``duplicates``. Nothing written here may become visible before
        :meth:`_commit` (or, for Elasticsearch, it must be idempotent by ``_id``).

        In upsert mode ``rows`` also hold ``_eo_delete`` (true: delete the key), one row per
        ID; each row applies only if its epoch is at least the key's stored one (invariant
        12), and the sink counts ``written``, ``deleted`` and ``stale`` (refused) rows."""

    @abstractmethod
    def _write_dead_letters(self, letters: Sequence[DeadLetter]) -> None:
        """Send records that cannot be written to the dead-letter destination, with their
        epoch, ID, error and payload, in the same atomic step as the rows where the sink
        allows it. Must not stall the batch: the rest of the shard proceeds (invariant 7)."""

    @abstractmethod
    def _commit(self, new_shards: Sequence[int]) -> None:
        """Make the written rows and one "(query, epoch, shard) committed" marker per shard
        in ``new_shards`` durable in ONE atomic step. A lost reply must be verifiable (a
        re-run reads the markers), never assumed failed (invariant 6)."""

    @abstractmethod
    def _close(self) -> None:
        """Release connections; an uncommitted step must not become visible. Safe to call
        in any status, and twice."""

    # -- the shared protocol -----------------------------------------------------------

    def run(self, batches: Iterator[pa.RecordBatch]) -> TaskResult:
        try:
            for batch in batches:
                self.write(batch)
            self.commit()
        finally:
            self.close()
        return self.result

    @allowed_in(TaskStatus.NEW, TaskStatus.OPEN)
    def write(self, batch: pa.RecordBatch) -> None:
        if batch.num_rows == 0:
            return
        if self.state is TaskStatus.NEW:
            committed = self._open()
            self.committed_before = committed if self.shard_markers else set()
            self.state = TaskStatus.OPEN
        self.shards.update(int(s) for s in pc.unique(batch.column(SHARD_COLUMN)).to_pylist())
        batch = self._drop_committed_shards(batch)
        if batch.num_rows == 0:
            return
        self.result.rows += batch.num_rows
        bad = pc.is_valid(batch.column(ERROR_COLUMN))
        if pc.any(bad).as_py():
            self._dead_letter_null_keys(batch.filter(bad))
            batch = batch.filter(pc.invert(bad))
        if batch.num_rows and self.dedup is not None:
            batch = self._drop_seen(batch)
        if self.one_per_key is not None:
            batch, repeats = self.one_per_key.keep(batch)
            self.result.duplicates += repeats
            if batch.num_rows:
                self._write_rows(batch.select([*self.columns, DELETE_COLUMN]))
        elif batch.num_rows:
            self._write_rows(batch.select(self.columns))

    @allowed_in(TaskStatus.NEW, TaskStatus.OPEN)
    def commit(self) -> None:
        """Commit the open step, then mark its IDs in the catalog (never before: invariant
        1). A task that saw no row has nothing to commit and stays NEW."""
        if self.state is TaskStatus.NEW:
            return
        self.result.shards = sorted(self.shards)
        new_shards = self.shards - self.committed_before if self.shard_markers else set()
        self._commit(sorted(new_shards))
        self.state = TaskStatus.COMMITTED
        crash_point("after_shard_commit", self.epoch)
        if self.dedup is not None:
            self.dedup.after_commit()  # mark only what is durably in the sink
            self.result.add_dedup_stats(self.dedup.stats)

    def close(self) -> None:
        """Release everything; safe in any status and twice. Not called when the Python
        worker is SIGKILLed: the sink's server drops the open step then."""
        if self.state is TaskStatus.CLOSED:
            return
        try:
            self._close()
        finally:
            self.state = TaskStatus.CLOSED
            if self.dedup is not None:
                self.dedup.close()

    def _drop_committed_shards(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        if not self.committed_before:
            return batch
        shard = batch.column(SHARD_COLUMN)
        done = pc.is_in(shard, value_set=ints_like(sorted(self.committed_before), shard.type))
        for s in pc.unique(pc.filter(shard, done)).to_pylist():
            if int(s) not in self.result.skipped_shards:
                self.result.skipped_shards.append(int(s))
        if self.dedup is not None:
            committed = batch.filter(pc.and_(done, pc.is_valid(batch.column(self.id_column))))
            if committed.num_rows:
                ids = ids_from_hex(committed.column(self.id_column))
                self.dedup.remember_committed(shards_of(committed), ids)
        return batch.filter(pc.invert(done))

    def _drop_seen(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        assert self.dedup is not None
        keep = self.dedup.keep(shards_of(batch), ids_from_hex(batch.column(self.id_column)))
        dropped = int(len(keep) - keep.sum())
        self.result.duplicates += dropped
        return batch.filter(bools(keep)) if dropped else batch  # no copy when all are new

    def _dead_letter_null_keys(self, bad: pa.RecordBatch) -> None:
        letters = [
            DeadLetter(self.epoch, int(shard), None, str(error), payload)
            for shard, error, payload in zip(
                bad.column(SHARD_COLUMN).to_pylist(),
                bad.column(ERROR_COLUMN).to_pylist(),
                bad.column(PAYLOAD_COLUMN).to_pylist(),
                strict=True,
            )
        ]
        self._send_dead_letters(letters)

    def _send_dead_letters(self, letters: Sequence[DeadLetter]) -> None:
        """Write dead letters (keyed first on a path without shard markers) and count them."""
        if self.letter_scope is not None:
            letters = [replace(d, key=self._letter_key(d)) for d in letters]
        self._write_dead_letters(letters)
        self.result.dead_letters += len(letters)

    def _letter_key(self, letter: DeadLetter) -> str:
        """``<partition>:<digest of the letter>:<n>``, the n-th identical letter of the task:
        the same for a re-run of the same partition (a task retry, or a restart over a source
        whose partitions are deterministic, as files and Kafka are)."""
        text = f"{letter.record_id}\0{letter.error}\0{letter.payload}"
        digest = hashlib.md5(text.encode(), usedforsecurity=False).hexdigest()
        self._letter_counts[digest] += 1
        return f"{self.letter_scope}:{digest}:{self._letter_counts[digest]}"


def shards_of(batch: pa.RecordBatch) -> Any:
    return int_values(batch.column(SHARD_COLUMN)).astype("int64")


TargetT = TypeVar("TargetT")


class TaskFactory(Protocol):
    """A sink's :class:`ShardTask` class, as its writer builds it: ``(target, epoch)``."""

    def __call__(self, target: Any, epoch: int, /) -> ShardTask: ...


class ShardWriter(Generic[TargetT]):
    """The ``mapInArrow`` function of one epoch. Spark pickles it to every task.

    A sink's writer names its task: ``task_class``, built as ``task_class(target, epoch)``
    in each executor task (the target holds config only; the task opens connections)."""

    task_class: ClassVar[TaskFactory]

    def __init__(self, target: TargetT, epoch: int) -> None:
        self.target = target
        self.epoch = epoch

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        yield self._task().run(batches).to_arrow()

    def for_epoch(self, epoch: int) -> ShardWriter[TargetT]:
        """The same writer for another epoch (a writer built before its epoch was known)."""
        return type(self)(self.target, epoch)

    def write_unaligned(self, batches: Iterator[pa.RecordBatch], partition: int) -> TaskResult:
        """Write a task whose rows are NOT one shard's (Spark's data source API hands each
        task the upstream plan's ``partition``): shard markers are neither trusted nor
        written, so the caller must only use this for writes that are idempotent by record
        ID; dead letters are keyed by the partition and their content instead."""
        task = self._task()
        task.shard_markers = False
        task.letter_scope = partition
        return task.run(batches)

    def _task(self) -> ShardTask:
        """The task that writes this epoch's shard in this executor."""
        return self.task_class(self.target, self.epoch)


class UnalignedTasks:
    """A ``mapInArrow`` function writing each Spark partition as it is (no shuffle by ID):
    :meth:`ShardWriter.write_unaligned` with the task's partition number. Only for a sink
    whose second write of a record ID is a no-op in the destination itself (see
    :attr:`~exactlyonce.connectors.base.sink.ExactlyOnceSink.writes_unaligned`)."""

    def __init__(self, writer: ShardWriter[Any]) -> None:
        self.writer = writer

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from pyspark import TaskContext

        context = TaskContext.get()
        partition = context.partitionId() if context is not None else 0
        yield self.writer.write_unaligned(batches, partition).to_arrow()
