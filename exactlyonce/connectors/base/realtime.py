"""The Spark Real-time Mode writer: exactly-once by source frontiers (DESIGN invariant 15).

``df.writeStream.foreach(sink.realtime()).trigger(realTime="5 seconds")``: Spark runs one
long task per source partition per epoch and calls, in that task, ``open(partition_id,
epoch_id)``, ``process(row)`` for each row as it arrives, and ``close(error)`` at the epoch's
end. This writer commits the rows in small chunks, each in ONE atomic step of the sink
together with the frontier (the next source offset to write) of every source partition in the
chunk; see :mod:`.frontier` for which rows a chunk may take.

A chunk is committed every ``commit_interval`` seconds (a daemon thread; a task's first
commit sooner, see FIRST_COMMIT_FRACTION and CATCH_UP_S), when ``max_pending_rows`` rows
wait, and at ``close(None)``. ``close(error)`` commits nothing more.
A commit whose sink no longer holds the frontier this writer read fails with
:class:`~exactlyonce.errors.FrontierMovedError` and writes nothing; Spark retries the task,
whose writer reads the frontier again. Rows below a frontier are skipped and counted.

The sink provides a :class:`FrontierTarget` (picklable, config only) whose
:class:`FrontierStore` (one per task, opened at its first row) does the I/O. The writer is
generic: a sink's Real-time Mode is one target; the Spark-facing lifecycle is written once.

When an earlier task of the query run said which source partition this Spark partition reads
(:mod:`.assignments`), ``open`` starts opening the store and reading that frontier in a
thread, before the first row arrives; the first row uses that read only when it comes from
that partition, with those columns.

Why this lives under ``connectors/base`` and not ``integration/``: ``sink.realtime()`` returns
it, and connectors may not import the integration layer; like the ``foreachBatch`` protocol
driver (:mod:`.sink`), it needs nothing of Spark but the task context.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from abc import ABC, abstractmethod
from collections import OrderedDict
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, final

from exactlyonce.connectors.base.assignments import Assignment, recall, remember
from exactlyonce.connectors.base.frontier import (
    Chunk,
    RowsPerRecord,
    SourceKey,
    SourceTracker,
    source_record_id,
)
from exactlyonce.connectors.base.sink import QUERY_ID_PROPERTY
from exactlyonce.dedup.ids import record_id
from exactlyonce.errors import ConfigError
from exactlyonce.faults import crash_point

if TYPE_CHECKING:
    import pyarrow as pa

log = logging.getLogger("exactlyonce.realtime")

BATCH_ID_PROPERTY = "streaming.sql.batchId"  # Spark's local property: the task's epoch
# The default commit interval: rows become visible about this long after they reach the writer.
# 20 ms: measured by bench realtime (bench/results/realtime.json), 50 ms against 100 took about
# a tenth of a second off PostgreSQL's p99, and 20 against 50 about 0.04 s off Kafka's (4 runs
# each in alternation: 0.199 s against 0.237, p50 0.023 against 0.039) for 2% more CPU per
# event: at 2,000 events/s the CPU is Spark's and the broker's polling, not the commits.
COMMIT_INTERVAL_S = 0.02
# A task's first commit comes after this fraction of the interval (8 ms by default): at an
# epoch's start, the rows that waited through Spark's epoch boundary (0.2-0.4 s, measured by
# bench realtime's epoch_gaps_s) reach the writer together, within 8-31 ms of the first, and
# they are the oldest rows; waiting a whole interval more is where an epoch's tail came from.
FIRST_COMMIT_FRACTION = 0.4
# ... or sooner, at the first pause of this long between two rows: the rows that waited are
# in (they arrive back to back, tens of microseconds apart), the writer caught up.
CATCH_UP_S = 0.001


@dataclass(frozen=True)
class RealtimeOptions:
    """The writer's options, validated on construction.

    - ``commit_interval``: seconds between commits of what is pending (> 0);
    - ``max_pending_rows``: commit at once when this many rows wait;
    - ``rows_per_source_record``: ``"one"`` (select, filter, map) or ``"many"`` (explode,
      flatMap: a commit then holds back the rows of the highest pending offset);
    - ``source_columns``: the stream's columns holding the Kafka topic, partition and offset.
    """

    commit_interval: float = COMMIT_INTERVAL_S
    max_pending_rows: int = 10_000
    rows_per_source_record: RowsPerRecord = "one"
    source_columns: tuple[str, str, str] = ("topic", "partition", "offset")

    def __post_init__(self) -> None:
        if not self.commit_interval > 0:
            raise ConfigError("commit_interval", f"must be > 0 seconds, got {self.commit_interval}")
        if self.max_pending_rows < 1:
            raise ConfigError("max_pending_rows", f"must be >= 1, got {self.max_pending_rows}")
        SourceTracker(self.rows_per_source_record)  # checks the option
        if len(self.source_columns) != 3 or len(set(self.source_columns)) != 3:
            raise ConfigError(
                "source_columns",
                f"three distinct columns (topic, partition, offset), got {self.source_columns}",
            )

    def missing_from(self, names: Sequence[str]) -> list[str]:
        return [c for c in self.source_columns if c not in names]

    def refuse_missing(self, names: Sequence[str]) -> None:
        """The precondition every write needs: the source's coordinates reach the writer."""
        missing = self.missing_from(names)
        if missing:
            raise ConfigError(
                "source_columns",
                f"the stream lacks {missing} (it has {list(names)}): a Real-time Mode writer "
                "needs each row's Kafka topic, partition and offset. Keep the Kafka source's "
                "columns in the query (select them next to your own), or name where they are "
                "with source_columns=(topic, partition, offset)",
            )


@dataclass(frozen=True)
class TaskInfo:
    """Who writes: the Spark query id (None outside Spark), the epoch, Spark's partition."""

    query_id: str | None
    epoch: int
    partition_id: int
    writer: str


class StaleFrontier(Exception):
    """Raised by :meth:`FrontierStore.commit`, having written nothing more: a frontier the
    store had returned from :meth:`FrontierStore.read` unread (trusted, see there) was not the
    sink's. ``frontiers``: what the sink holds now, read, for those partitions and for any of
    the chunk it committed before finding out. The writer drops the chunk's rows they cover
    (:meth:`~.frontier.SourceTracker.correct`) and commits the rest."""

    def __init__(self, frontiers: dict[SourceKey, int | None]) -> None:
        super().__init__(frontiers)
        self.frontiers = frontiers


class FrontierStore(ABC):
    """One task's link to the sink, opened in the task at its first row."""

    @abstractmethod
    def prepare(self, columns: Sequence[str]) -> None:
        """Check that the destination can take rows of ``columns`` (the stream's, then the
        record ID and the epoch); ConfigError otherwise. Called once, before any write."""

    @abstractmethod
    def read(self, key: SourceKey) -> int | None:
        """The frontier of ``key`` as the sink holds it now (None: none stored). A store kept
        from an earlier epoch may return the frontier it committed itself, unread, when its
        next commit would fail if anyone else had moved it since: that commit then raises
        :class:`StaleFrontier` instead of writing."""

    @abstractmethod
    def commit(self, chunk: Chunk) -> None:
        """Write ``chunk.rows`` and store ``chunk.next_offsets``, in ONE atomic step that
        happens only if every frontier of the chunk is still ``chunk.expected`` in the sink;
        otherwise write nothing and raise FrontierMovedError. Must never leave part of a
        chunk behind. A failure whose outcome is unknown may be raised as it is: the retried
        task reads the frontiers again, so nothing is guessed."""

    @abstractmethod
    def close(self) -> None:
        """Release the connection; an uncommitted step is rolled back. Safe twice."""

    def renew(self, task: TaskInfo) -> bool:
        """Take the next epoch's ``task`` on a store kept open since an epoch of the same
        target ended well (:func:`park`); False when it cannot be kept (it is then closed).
        Every frontier is read again after it. By default a store is never kept."""
        return False


class FrontierTarget(ABC):
    """A sink's Real-time Mode destination: config only, pickled to the tasks."""

    query_name: str

    @abstractmethod
    def open_store(self, task: TaskInfo) -> FrontierStore:
        """A connected store for one task."""


def _task_info(partition_id: int, epoch_id: int) -> TaskInfo:
    try:
        from pyspark import TaskContext

        context = TaskContext.get()
    except ImportError:  # pragma: no cover - pyspark is a dependency
        context = None
    query_id = context.getLocalProperty(QUERY_ID_PROPERTY) if context is not None else None
    attempt = context.attemptNumber() if context is not None else 0
    writer = f"{(query_id or 'no-query')[:8]}:{epoch_id}:{partition_id}:{attempt}"
    writer += f":{uuid.uuid4().hex[:6]}"
    return TaskInfo(query_id, int(epoch_id), int(partition_id), writer)


@final
class RealtimeWriter:
    """A Spark ``foreach`` writer for Real-time Mode (see the module docstring). Picklable:
    it holds the target's config and options; the store, the lock and the flusher thread
    are made in the task, by :meth:`open`."""

    def __init__(
        self,
        target: FrontierTarget,
        options: RealtimeOptions,
        id_columns: tuple[str, ...] | None = None,
    ) -> None:
        self.target = target
        self.options = options
        self.id_columns = id_columns
        self._reset()

    def _reset(self) -> None:
        self.task: TaskInfo | None = None
        self.store: FrontierStore | None = None
        self.tracker = SourceTracker(self.options.rows_per_source_record)
        self.positions: tuple[int, int, int] | None = None
        self.columns: tuple[str, ...] = ()
        self.id_positions: tuple[int, ...] = ()
        self.last_source: tuple[SourceKey, int] | None = None
        self.nth = 0
        self.failure: BaseException | None = None
        self.commits = self.written = 0
        self.last_row_at = 0.0  # when the last row (batch) was taken, after its frontier read
        self.lock: threading.Lock | None = None
        self.stop: threading.Event | None = None
        self.flusher: threading.Thread | None = None
        self.hint: Assignment | None = None  # the source partition an earlier task read
        self.early: threading.Thread | None = None  # opens the store and reads, at open()
        self.early_read: tuple[FrontierStore, int | None] | None = None  # what it got
        self.frontiers_read: dict[SourceKey, int | None] = {}  # read early, not yet used

    def __getstate__(self) -> dict[str, Any]:
        return {"target": self.target, "options": self.options, "id_columns": self.id_columns}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["target"], state["options"], state["id_columns"])

    # -- Spark's calls -----------------------------------------------------------------

    def open(self, partition_id: int, epoch_id: int) -> bool:
        """Called by Spark in the task at the start of each epoch: the early read starts
        when an earlier task of the run said which source partition comes (see the module
        docstring); nothing is written before the first row."""
        self._reset()
        self.task = _task_info(partition_id, epoch_id)
        self.lock = threading.Lock()
        self._start_early_read()
        return True

    def process(self, row: Any) -> None:
        """Called by Spark for each row, as it arrives."""
        assert self.lock is not None, "open() first"
        self._take(row.__fields__, (row,))

    def write_arrow(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        """The same writer as a ``mapInArrow`` function (:func:`arrow_transport_conf`): one
        task's batches of one epoch, each row handed on as :meth:`process` would be; yields
        nothing. The epoch is Spark's ``streaming.sql.batchId`` of the task."""
        from pyspark import TaskContext

        context = TaskContext.get()
        epoch = context.getLocalProperty(BATCH_ID_PROPERTY) if context is not None else None
        if context is None or epoch is None:
            raise ConfigError(
                "transport", "write_arrow runs in a Spark streaming query's task (mapInArrow)"
            )
        self.open(context.partitionId(), int(epoch))
        assert self.lock is not None
        try:
            for batch in batches:
                if not batch.num_rows:
                    continue
                self._take(batch.schema.names, arrow_rows(batch))
        except BaseException as exc:
            self.close(exc)
            raise
        self.close(None)
        yield from ()

    def close(self, error: BaseException | None) -> None:
        """Called by Spark at the epoch's end (``error`` None) or after a failure: commits
        what is pending only when the epoch ended well. Not called when the process dies:
        a re-run then starts from the frontiers."""
        if self.stop is not None:
            self.stop.set()
        if self.flusher is not None:
            self.flusher.join()
        if self.store is None:  # no row came: a store opened early is kept as any other
            self._adopt_early_read(self.hint.columns if self.hint else ())
        ended_well = False
        try:
            if error is None and self.failure is None and self.store is not None:
                assert self.lock is not None and self.task is not None
                with self.lock:
                    self._commit(final=True)
                crash_point("rtm_epoch_end", self.task.epoch)
                ended_well = True
        finally:
            if self.store is not None and ended_well:
                park(self.target, self.store, self.columns)
            elif self.store is not None:
                self.store.close()
            if self.task is not None and self.store is not None:
                log.info(
                    "%s epoch %d partition %d: %d rows in %d commits, %d skipped (below the "
                    "frontier)",
                    self.target.query_name,
                    self.task.epoch,
                    self.task.partition_id,
                    self.written,
                    self.commits,
                    self.tracker.skipped,
                )
        if error is None:
            self._raise_failure()

    # -- the steps ---------------------------------------------------------------------

    def _take(self, names: Sequence[str], rows: Iterable[Any]) -> None:
        """Rows that arrived together (one row, or an Arrow batch's), in order."""
        assert self.lock is not None
        arrived = time.monotonic()
        with self.lock:
            self._raise_failure()
            if self.store is None:
                self._first_row(list(names))
            self._commit_if_caught_up(arrived)
            for row in rows:
                self._add(row)
            self._start_flusher()
            self.last_row_at = time.monotonic()
            if self.tracker.pending >= self.options.max_pending_rows:
                self._commit(final=False)

    def _first_row(self, names: list[str]) -> None:
        """Preconditions, then the store: nothing is written before both hold."""
        self.options.refuse_missing(names)
        if self.id_columns is not None:
            missing = [c for c in self.id_columns if c not in names]
            if missing:
                raise ConfigError("id_columns", f"not in the stream's columns {names}: {missing}")
            self.id_positions = tuple(names.index(c) for c in self.id_columns)
        topic, partition, offset = self.options.source_columns
        self.positions = (names.index(topic), names.index(partition), names.index(offset))
        assert self.task is not None
        self._adopt_early_read(tuple(names))
        if self.store is None:
            self.columns = tuple(names)
            self.store = self._store(self.columns)

    def _store(self, columns: tuple[str, ...]) -> FrontierStore:
        """The store an earlier epoch of this target parked in this worker, renewed for this
        task, or a new one, checked for the stream's ``columns``."""
        assert self.task is not None
        parked = unpark(self.target, self.task, columns)
        if parked is not None:
            return parked
        store = self.target.open_store(self.task)
        try:
            store.prepare(columns)
        except BaseException:
            store.close()
            raise
        return store

    # -- the early read (see the module docstring) -------------------------------------

    def _start_early_read(self) -> None:
        assert self.task is not None
        if self.task.query_id is None:  # outside a Spark query: no run to remember
            return
        self.hint = recall(self.task.query_id, self.target.query_name, self.task.partition_id)
        if self.hint is None:
            return
        self.early = threading.Thread(
            target=self._read_early, args=(self.hint,), name="exactlyonce-rtm-early", daemon=True
        )
        self.early.start()

    def _read_early(self, hint: Assignment) -> None:
        """In a thread: the store for the hinted columns, and the hinted frontier. A failure
        only means the first row reads it again."""
        store = None
        try:
            store = self._store(hint.columns)
            self.early_read = (store, store.read(hint.key))
        except BaseException as exc:
            log.debug("%s: early frontier read failed: %s", self.target.query_name, exc)
            if store is not None:
                store.close()

    def wait_for_early_read(self) -> None:
        """Until the early read (if any) has ended."""
        if self.early is not None:
            self.early.join()

    def _adopt_early_read(self, columns: tuple[str, ...]) -> None:
        """Take the store opened early when it was checked for ``columns``; else close it."""
        self.wait_for_early_read()
        found, self.early_read = self.early_read, None
        if found is None or self.hint is None:
            return
        store, frontier = found
        if self.hint.columns != columns:
            store.close()
            return
        self.store, self.columns = store, columns
        self.frontiers_read = {self.hint.key: frontier}

    def _read_frontier(self, key: SourceKey) -> int | None:
        """A source partition's frontier at its first row: read early, or now. The task's
        first partition is remembered for the next task of its Spark partition."""
        assert self.store is not None and self.task is not None
        if key in self.frontiers_read:
            return self.frontiers_read.pop(key)
        if self.task.query_id is not None and not self.tracker.parts:
            assignment = Assignment(key, self.columns)
            if assignment != self.hint:
                remember(
                    self.task.query_id, self.target.query_name, self.task.partition_id, assignment
                )
        return self.store.read(key)

    def _commit_if_caught_up(self, arrived: float) -> None:
        """Before a task's first commit: a pause of CATCH_UP_S since the last row was taken
        means the rows that waited through the epoch boundary are all in; commit them now."""
        if self.commits or not self.tracker.pending:
            return
        if arrived - self.last_row_at >= CATCH_UP_S:
            self._commit(final=False)

    def _start_flusher(self) -> None:
        """Once, after the first row is in (its frontier read, which may take a while, done):
        the first commit's wait starts from there."""
        if self.flusher is not None:
            return
        self.stop = threading.Event()
        self.flusher = threading.Thread(
            target=self._flush_every_interval, name="exactlyonce-rtm-flusher", daemon=True
        )
        self.flusher.start()

    def _flush_every_interval(self) -> None:
        """Commit what is pending every interval, the first time sooner (FIRST_COMMIT_FRACTION)."""
        assert self.stop is not None and self.lock is not None
        interval = self.options.commit_interval
        wait = interval * FIRST_COMMIT_FRACTION
        while not self.stop.wait(wait):
            wait = interval
            with self.lock:
                if self.failure is not None:
                    return
                try:
                    self._commit(final=False)
                except BaseException as exc:  # raised by the next process() or close()
                    self.failure = exc
                    return

    def _add(self, row: Any) -> None:
        assert self.positions is not None and self.store is not None and self.task is not None
        t, p, o = self.positions
        topic, partition, offset = row[t], row[p], row[o]
        if topic is None or partition is None or offset is None:
            raise ConfigError(
                "source_columns", f"a row without source coordinates: {topic}[{partition}]@{offset}"
            )
        key: SourceKey = (str(topic), int(partition))
        if not self.tracker.has_read(key):
            self.tracker.read(key, self._read_frontier(key))
        source = (key, int(offset))
        self.nth = self.nth + 1 if source == self.last_source else 0
        self.last_source = source
        self.tracker.add(key, int(offset), (*row, self._record_id(row, source), self.task.epoch))

    def _record_id(self, row: Any, source: tuple[SourceKey, int]) -> str:
        if self.id_columns is not None:
            try:
                return record_id([row[i] for i in self.id_positions])
            except ValueError:
                raise ConfigError(
                    "id_columns", f"a row with a null key column ({list(self.id_columns)})"
                ) from None
        (topic, partition), offset = source
        many = self.options.rows_per_source_record == "many"
        return source_record_id(topic, partition, offset, self.nth if many else None)

    def _commit(self, final: bool) -> None:
        assert self.store is not None
        assert self.task is not None
        chunk = self.tracker.take(final)
        if chunk is None:
            return
        crash_point("rtm_before_chunk", self.task.epoch)
        for _ in range(len(chunk.taken) + 1):  # a store corrects each partition at most once
            try:
                self.store.commit(chunk)
            except StaleFrontier as stale:
                corrected = self.tracker.correct(chunk, stale.frontiers)
                if corrected is None:
                    return
                chunk = corrected
                continue
            self.tracker.committed(chunk)
            self.commits += 1
            self.written += len(chunk.rows)
            crash_point("rtm_after_chunk", self.task.epoch)
            return
        raise AssertionError(f"{self.target.query_name}: a store corrected a frontier twice")

    def _raise_failure(self) -> None:
        if self.failure is not None:
            raise self.failure


# -- stores kept across epochs --------------------------------------------------------------
# Spark gives a finished task's Python worker to the next task (spark.python.worker.reuse, on
# by default), and Real-time Mode starts the next epoch's tasks at once: a store whose epoch
# ended well waits here for the next task of its target, which then skips the connection
# (PostgreSQL) or the producer's start (Kafka). One task runs in a worker at a time.

MAX_PARKED = 4  # stores kept per worker; the oldest is closed
MAX_PARKED_S = 60.0  # a store idle longer is closed instead of renewed

_parked: OrderedDict[tuple[FrontierTarget, tuple[str, ...]], tuple[FrontierStore, float]] = (
    OrderedDict()
)
_parked_lock = threading.Lock()


def _parking_key(
    target: FrontierTarget, columns: tuple[str, ...]
) -> tuple[FrontierTarget, tuple[str, ...]] | None:
    try:
        hash(target)
    except TypeError:  # a target without value equality is never matched again
        return None
    return (target, columns)


def park(target: FrontierTarget, store: FrontierStore, columns: tuple[str, ...]) -> None:
    """Keep ``store`` (its epoch ended well, checked for ``columns``) for the next task."""
    key = _parking_key(target, columns)
    if key is None:
        store.close()
        return
    with _parked_lock:
        old = _parked.pop(key, None)
        _parked[key] = (store, time.monotonic())
        evicted = [_parked.popitem(last=False)[1][0] for _ in range(len(_parked) - MAX_PARKED)]
    for closing in ([old[0]] if old and old[0] is not store else []) + evicted:
        closing.close()


def unpark(
    target: FrontierTarget, task: TaskInfo, columns: tuple[str, ...]
) -> FrontierStore | None:
    """The store parked for ``target`` and ``columns``, renewed for ``task``; None when
    there is none, or it idled too long, or it cannot be renewed (then it is closed)."""
    key = _parking_key(target, columns)
    if key is None:
        return None
    with _parked_lock:
        found = _parked.pop(key, None)
    if found is None:
        return None
    store, since = found
    if time.monotonic() - since <= MAX_PARKED_S and store.renew(task):
        return store
    store.close()
    return None


def close_parked() -> None:
    """Close every parked store (a fresh worker's state; tests)."""
    with _parked_lock:
        stores = [store for store, _ in _parked.values()]
        _parked.clear()
    for store in stores:
        store.close()


def arrow_rows(batch: pa.RecordBatch) -> Iterator[tuple[Any, ...]]:
    """A batch's rows as tuples of the values a foreach writer's Row would hold: timestamps
    naive in local time (Arrow gives them with their zone), everything else as Arrow gives."""
    import pyarrow as pa

    columns = []
    for column in batch.columns:
        values = column.to_pylist()
        if pa.types.is_timestamp(column.type) and column.type.tz is not None:
            values = [v if v is None else v.astimezone().replace(tzinfo=None) for v in values]
        columns.append(values)
    return zip(*columns, strict=True)


def realtime_options(
    schema: Any,
    commit_interval: float,
    max_pending_rows: int,
    rows_per_source_record: RowsPerRecord,
    source_columns: Sequence[str],
) -> RealtimeOptions:
    """A sink's ``realtime()`` arguments as options, checked: three source columns, each in
    ``schema`` (the stream's StructType) when given. ConfigError names the option."""
    columns = tuple(source_columns)
    if len(columns) != 3:
        raise ConfigError("source_columns", f"three columns, got {list(columns)}")
    options = RealtimeOptions(commit_interval, max_pending_rows, rows_per_source_record, columns)
    if schema is not None:
        options.refuse_missing(schema.names)
    return options


def writer_for(
    sink: Any, target: FrontierTarget, options: RealtimeOptions, content_ids: bool
) -> RealtimeWriter:
    """The writer of ``sink`` (named in the row-buffer warning, when Spark's buffer delays
    rows): record IDs from the sink's ``id_columns``, or (``content_ids``: ``id_from`` content
    or source) from the source coordinates."""
    warning = row_buffer_warning()
    if warning is not None:
        log.warning("%s: %s", sink, warning)
    return RealtimeWriter(target, options, None if content_ids else tuple(sink.ids.columns))


# Spark's JVM hands a Python foreach writer its rows through a buffer of spark.buffer.size
# bytes (64 KiB by default), and in batches that double while they stay under 1 MiB
# (SerDeUtil.AutoBatchedPickler): at moderate rates rows reach process() late, or at the
# epoch's end. Commits cannot be sooner than rows arrive.
ROW_BUFFER_SETTING = "spark.buffer.size"


def row_buffer_warning() -> str | None:
    """A warning when the active Spark session keeps Python foreach rows in a large buffer."""
    try:
        from pyspark.sql import SparkSession

        spark = SparkSession.getActiveSession()
        if spark is None:
            return None
        size = int(spark.sparkContext.getConf().get(ROW_BUFFER_SETTING, "65536"))
    except Exception:  # no classic session (Spark Connect): nothing to tell
        return None
    if size <= 4096:
        return None
    return (
        f"{ROW_BUFFER_SETTING} is {size} bytes: Spark passes rows to a Python foreach writer "
        f"only when that buffer fills, so at moderate rates they reach it (and become visible) "
        f"near the epoch's end. Start the session with {ROW_BUFFER_SETTING}=1 for sub-second "
        "visibility (docs/guides/real-time-mode.md)"
    )
