"""The sink contract shared by every connector.

A sink is a ``foreachBatch`` callable. Spark calls it in the driver once per micro-batch with
the batch's DataFrame and its ``batchId`` (our *epoch*). The sink object holds configuration
only; connections open inside executor tasks (the object built by :meth:`_task_writer` is
pickled to them) or briefly in the driver for the head.

The protocol, in the order it runs (DESIGN.md, "One batch, in order"):

1. On the first call after a (re)start, :meth:`_start` preflights the destination, reads the
   sink head back from it, and checks the head belongs to this Spark checkpoint.
2. An epoch at or below the head is skipped whole, without touching the destination. Its
   plan still runs, into Spark's ``noop`` sink (:func:`run_without_writing`), so that a
   stateful query's operators commit their state for the batch.
3. Every record gets a deterministic ID; records are spread over shards by ID hash.
4. Each executor task writes its shard's records and a "(query, epoch, shard) committed"
   marker in one atomic step; a shard already committed by an earlier attempt is skipped.
5. Only when every task succeeded does the driver advance the head to the epoch.

Guarantee: the destination ends up with exactly the records a crash-free run produces, through
driver crashes, task retries and re-runs of an epoch. Not guaranteed: ordering between
shards, and anything written to the destination by other writers.
"""

from __future__ import annotations

import logging
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Hashable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, TypeVar, cast, final

from exactlyonce.connectors.base.columns import SHARD_COLUMN
from exactlyonce.connectors.base.config import Setting, SinkConfig
from exactlyonce.connectors.base.guarantee import (
    OK,
    Check,
    Guarantee,
    GuaranteeReport,
    SinkCheck,
    checked,
    head_check,
    trigger_check,
)
from exactlyonce.connectors.base.head import NO_EPOCH, Head, HeadStore
from exactlyonce.connectors.base.logs import BATCH_LOGGER, show_batches_by_default
from exactlyonce.connectors.base.observers import publish
from exactlyonce.connectors.base.projection import ExpressionMemo, id_expressions
from exactlyonce.connectors.base.report import (
    TASK_RESULT_SCHEMA,
    BatchReport,
    TaskResult,
    batch_line,
    bloom_over_capacity,
    catalog_summary,
)
from exactlyonce.connectors.base.rewind import Refused, Rewind
from exactlyonce.connectors.base.shared_report import share_report
from exactlyonce.connectors.base.task import ShardWriter, UnalignedTasks
from exactlyonce.connectors.base.upsert import UpsertSpec, shard_order, upsert_expressions
from exactlyonce.dedup.keeper import CatalogKeeper, RebuildSource
from exactlyonce.dedup.shard import DedupPlan
from exactlyonce.errors import CatalogLostError, CheckpointResetError, ConfigError
from exactlyonce.faults import crash_point
from exactlyonce.retry import RetryPolicy
from exactlyonce.secrets import dsn_password

MemoT = TypeVar("MemoT")
SinkT = TypeVar("SinkT", bound="ExactlyOnceSink")

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import Column, DataFrame
    from pyspark.sql.types import StructType

    from exactlyonce.dedup.ids import RecordIdSpec


log = logging.getLogger("exactlyonce")
batch_log = logging.getLogger(BATCH_LOGGER)

# After a failed epoch write whose cause was the catalog: 0.5 s doubling up to 10 s.
CATALOG_RETRY = RetryPolicy(initial_s=0.5, max_s=10.0)

TaskWriter = Callable[["Iterator[pa.RecordBatch]"], "Iterator[pa.RecordBatch]"]


QUERY_ID_PROPERTY = "sql.streaming.queryId"  # Spark's local property in a query's thread


def spark_query_name(query_name: str) -> str:
    """The name a streaming query of ``query_name`` has in Spark (``.queryName``): the
    ``query_name`` with ``-`` as ``_``, as :func:`~exactlyonce.integration.spark.start_stream`
    names it."""
    return query_name.replace("-", "_")


def spark_query_id(df: DataFrame, query_name: str | None = None) -> str | None:
    """The streaming query's id: stable across restarts from one checkpoint, new for a new one.

    In a classic session, Spark's local property ``sql.streaming.queryId``, which the query's
    thread carries into ``foreachBatch``. Under Spark Connect (``foreachBatch`` runs on the
    server, with a Connect session and no SparkContext): the query active in the session, if
    it is the only one, else the one named after ``query_name`` (:func:`spark_query_name`).
    None when neither establishes it; the guard then refuses a head with committed epochs
    (:func:`refuse_another_checkpoint`)."""
    session = df.sparkSession
    try:
        context = session.sparkContext
    except Exception:  # Spark Connect has no SparkContext
        return connect_query_id(session, query_name)
    value = context.getLocalProperty(QUERY_ID_PROPERTY)
    return str(value) if value else None


def connect_query_id(session: Any, query_name: str | None) -> str | None:
    """The id of the query whose ``foreachBatch`` runs now in a Spark Connect ``session``:
    the one query active there, or the only one named after ``query_name``; None when the
    session's queries cannot be listed or do not say which."""
    try:
        active = list(session.streams.active)
    except Exception:
        return None
    if len(active) != 1:
        names = {query_name, spark_query_name(query_name)} if query_name else set()
        active = [q for q in active if q.name in names]
    return str(active[0].id) if len(active) == 1 else None


def fresh(head: Head) -> bool:
    """Nothing committed under ``head`` and no Spark query bound to it: no run to mistake."""
    return head.epoch == NO_EPOCH and not head.spark_query_id


def refuse_another_checkpoint(
    sink_name: str, query_name: str, head: Head, query_id: str | None, *, trust: bool = False
) -> None:
    """Invariants 9 and 13: a head another Spark checkpoint wrote is never taken for a
    replay, and a run whose Spark query id is unknown (``query_id`` None) cannot prove it is
    not one, so it is refused too unless the head is :func:`fresh`, or ``trust`` (the
    config's ``allow_unknown_query_id``) says the user accepts that risk. A different id is
    refused even then. Every driver of the protocol (``foreachBatch``, the data source
    path's start, tasks and commits) refuses through here."""
    if query_id is None:
        if not (trust or fresh(head)):
            raise CheckpointResetError(unknown_query_id(sink_name, query_name, head))
        return
    if head.spark_query_id and head.spark_query_id != query_id:
        raise CheckpointResetError(
            f"{sink_name}: the head of query_name {query_name!r} was written by Spark query "
            f"{head.spark_query_id}, but this run is query {query_id} (a new or deleted "
            "checkpoint, or another query running under this query_name). Its epochs would "
            "restart at 0 and be skipped as already committed, or interleave with the other "
            "query's. Use a new query_name, or reset the head explicitly with `exactlyonce "
            "reset-head` / sink.reset_head() if you mean to start over."
        )


def _rebuilt(cls: type[SinkT], config: SinkConfig, parts: dict[str, Any]) -> SinkT:
    """A pickled sink, built again from its config (and its :meth:`_pickled_parts`)."""
    sink = cls.__new__(cls)
    sink.__dict__.update(parts)
    sink._set_up(config, check=False)
    return sink


def unknown_query_id(sink_name: str, query_name: str, head: Head) -> str:
    """Why a run without a Spark query id is refused, and the ways out."""
    holds = f"holds epochs up to {head.epoch}" if head.epoch != NO_EPOCH else "exists"
    owner = f" and names Spark query {head.spark_query_id}" if head.spark_query_id else ""
    return (
        f"{sink_name}: Spark's query id cannot be established for this run of query_name "
        f"{query_name!r}, and its head {holds}{owner}. A run from a deleted checkpoint "
        "restarts at epoch 0 and would skip every epoch up to the head as already committed, "
        "and the sink cannot tell it from a restart without the id. Call the sink as a "
        "streaming query's foreachBatch, where the id is visible (classic Spark; under Spark "
        "Connect, the only query of its session or one started with "
        f".queryName({spark_query_name(query_name)!r})), use a new "
        "query_name, reset the head with `exactlyonce reset-head` / sink.reset_head() if you "
        "mean to start over, or set allow_unknown_query_id=True if this checkpoint is never "
        "deleted or replaced."
    )


def default_parallelism(spark: Any) -> int:
    """How many tasks the session runs at once by default: the SparkContext's
    ``defaultParallelism``; under Spark Connect (no SparkContext in the client or in
    ``foreachBatch`` on the server) ``spark.default.parallelism`` if set, else the number of
    shuffle partitions (what a repartition by shard uses anyway)."""
    try:
        return int(spark.sparkContext.defaultParallelism)
    except Exception:  # Spark Connect
        conf = spark.conf
        given = conf.get("spark.default.parallelism", None)
        return int(given or conf.get("spark.sql.shuffle.partitions"))


def run_without_writing(df: DataFrame) -> None:
    """Run a batch's whole plan and discard its rows (Spark's ``noop`` sink).

    For an epoch the sink skips: a stateful query's operators (``dropDuplicates``,
    aggregations) commit their state for the batch only when every partition of it ran. A
    batch Spark re-runs after a crash between the sink head and its own commit log would
    otherwise leave its state uncommitted: Spark 4 then fails the query
    (STATE_STORE_COMMIT_VALIDATION_FAILED), older Spark the next batch. A stateless batch
    pays one extra read of its input, and only on these rare re-runs.
    """
    df.write.format("noop").mode("overwrite").save()


class ExactlyOnceSink(ABC):
    """A ``foreachBatch`` callable that writes each record of a stream exactly once.

    Subclasses say how to reach their destination: preflight, the head, and the task writer.
    """

    kind: str = "sink"
    query_name = Setting[str]()
    shards = Setting[int | None]()
    write_retries = Setting[int]()
    # Sort each shard by record ID before the write: B-tree inserts into a unique index then
    # walk the tree in order (PostgreSQL). Sinks without an ordered index leave it off.
    sort_within_shard: bool = False

    config: SinkConfig
    # The column (or field) the record ID travels in to the task writer.
    id_column: str

    @final
    @classmethod
    def from_config(cls: type[SinkT], config: Any, *, check: bool = True) -> SinkT:
        """The sink of an already validated config (a pipeline file's ``sink:``): the same
        object its constructor builds from the same values. ``check`` preflights now."""
        sink = cls.__new__(cls)
        sink._set_up(config, check)
        return sink

    @final
    def _set_up(self, config: SinkConfig, check: bool) -> None:
        """Take what every sink shares from ``config``, then the sink's own settings
        (:meth:`_configure`); preflight the destination when ``check``. Every constructor
        and :meth:`from_config` end here."""
        self.config = config
        self.ids: RecordIdSpec = config.record_ids()
        self._head: Head | None = None
        self._started_for: str | None = None
        self.reports: list[BatchReport] = []
        self.dedup_config = config.dedup_config()
        self._keeper: CatalogKeeper | None = None
        self._configure(config)
        if check:
            self.preflight()

    def _configure(self, config: Any) -> None:
        """Keep the sink's own settings from its config model (no connection here): a
        hook for the sink's constructor path, called once by :meth:`_set_up`."""
        return None

    # -- checks the sinks share -------------------------------------------------------

    def _check_id_columns(self, names: Sequence[str]) -> None:
        """Refuse a stream that lacks one of the ``id_columns``."""
        missing = self.ids.missing_from(names)
        if missing:
            raise ConfigError("id_columns", f"not in the stream's columns {names}: {missing}")

    @staticmethod
    def _refuse_reserved_columns(
        names: Sequence[str], reserved: Sequence[tuple[str, str]], why: str
    ) -> None:
        """Refuse a stream column named like one the sink adds: ``reserved`` holds (column,
        the option that names it); ``why`` ends the message."""
        for column, field_name in reserved:
            if column in names:
                raise ConfigError(
                    field_name, f"the stream already has a column named {column!r}{why}"
                )

    # -- what subclasses provide -------------------------------------------------------

    @abstractmethod
    def preflight(self, schema: StructType | None = None) -> None:
        """Prepare and check the destination before writing: create what the sink keeps
        (tables, indices, topics, the head's storage) where it may, and refuse a stream whose
        columns it cannot write (ConfigError naming the setting) or a destination it cannot
        reach (SinkUnavailableError).

        Called in the driver by the protocol once per query (re)start, before the head is
        read, with the stream's schema; by constructors (``check=True``) and ``exactlyonce
        check --create`` without one. Must be idempotent (a restart runs it again) and must
        not write records or move the head. Not guaranteed to run before every epoch."""

    @abstractmethod
    def head_store(self) -> HeadStore:
        """Where this sink keeps its head: a :class:`~exactlyonce.connectors.base.head.
        HeadStore` (read in the driver only, by the protocol, each method's obligations
        there). Called whenever the driver needs the head; may return a new object each
        time (config only: it opens its own connections), or one it keeps."""

    def _fence_earlier_writers(self, head: Head) -> None:
        """Fence the writers of earlier runs of this query, so that none can still commit
        (Kafka: ``init_transactions`` of every shard's transactional id). Default: nothing.

        Called by the protocol in the driver once per (re)start, after the head was checked
        against this run's Spark query id (invariant 9) and before any task runs. Never
        before that check: a second query under a live ``query_name`` must be refused before
        it can fence the running query's writers. Not called by a start that left the check
        to its tasks (``checked_by_tasks`` and no id): it cannot tell the running query from
        an earlier run of its own, and its tasks fence their own earlier attempts."""
        return None

    def check_trigger(self, interval_s: float | None) -> None:
        """Refuse a trigger interval the sink cannot serve (ConfigError); most can serve any."""
        return None

    def head(self) -> Head | None:
        """The committed head as the destination has it now; None before the first epoch."""
        return self.head_store().read_head()

    def reset_head(self) -> None:
        """Forget what this query committed (not the data): for a deliberate fresh start,
        on a user's explicit request only (``exactlyonce reset-head``)."""
        self.head_store().reset_head()
        self._head = None
        log.warning("%s: head reset", self)

    @property
    def sink_name(self) -> str:
        """The head's key together with ``query_name``: names the destination
        (``config.sink_name``, by default ``<type>:<destination>``)."""
        return self.config.head_name

    @abstractmethod
    def _project(self, df: DataFrame, epoch: int) -> DataFrame:
        """The epoch's rows as the task writer takes them: the destination's columns, cast,
        with the record ID (:meth:`_with_ids`) and the epoch column.

        Called in the driver once per epoch the protocol writes (not for skipped epochs), on
        the batch's DataFrame; it only builds a plan (no action, no connection). Must be
        deterministic: a re-run of the epoch must give every record the same ID."""

    @abstractmethod
    def _task_writer(self, epoch: int, columns: Sequence[str]) -> TaskWriter:
        """The picklable ``mapInArrow`` function of this epoch (a :class:`ShardWriter`).

        Called in the driver once per written epoch (and once per query run on the data
        source path, then re-targeted with ``for_epoch``); Spark pickles it to every executor
        task. It holds config only, no connection: each task opens its own. Each task must
        write its shard's rows, dead letters and shard-commit marker in one atomic step
        (or idempotently by record ID, then the marker) and report one TaskResult; a task
        that fails must leave nothing visible that a re-run would not overwrite."""

    # -- inspection and rewind (``exactlyonce heads`` / ``exactlyonce rewind``) --------------

    def peek_head(self) -> Head | None:
        """The head as the destination has it now, read without creating anything (no table,
        index, topic or head): for inspection. The default is :meth:`head`, which every sink
        whose head read creates nothing keeps."""
        return self.head()

    def rewinder(self) -> Rewind:
        """What ``exactlyonce rewind`` and ``heads`` ask of this sink's records by epoch
        (:class:`~exactlyonce.connectors.base.rewind.Rewind`). The default refuses; a sink
        whose records carry their epoch returns its package's rewind over its parts."""
        return Refused(
            f"{type(self).__name__} cannot remove the records it wrote by epoch, so a rewind "
            "could not make a re-run write each record once"
        )

    @property
    def unique_sink(self) -> bool:
        """True when the destination itself refuses a second copy of an ID."""
        return True

    @property
    def upsert(self) -> UpsertSpec | None:
        """Set in ``mode="upsert"`` (see :mod:`.upsert`): each shard then reaches its task
        sorted by (record ID, canonical encoding), with the ``_eo_delete`` flag, and the
        task keeps one row per ID and writes under the sink's epoch guard."""
        return None

    def _rebuild_source(self) -> RebuildSource | None:
        """The sink's own recent IDs, to rebuild a lost catalog; None if it cannot list them."""
        return None

    @property
    def dedup_plan(self) -> DedupPlan | None:
        return self._keeper.plan if self._keeper is not None else None

    # -- what `exactlyonce check` reports (see .guarantee) -------------------------------

    @abstractmethod
    def check(self) -> SinkCheck:
        """What ``exactlyonce check`` asks of this sink: a
        :class:`~exactlyonce.connectors.base.guarantee.SinkCheck` (its guarantee in its mode,
        and each precondition of it checked live, without side effects).

        Called in the driver by :meth:`guarantee_report` (the CLI's ``check``), never while a
        query runs; may connect, must not create or write anything."""

    def guarantee(self) -> Guarantee:
        """The guarantee this sink gives in its mode, and the mechanism it rests on."""
        return self.check().guarantee()

    def preconditions(self) -> list[Check]:
        """Each precondition of :meth:`guarantee`, checked live and without side effects."""
        return self.check().preconditions()

    @final
    def guarantee_report(
        self,
        *,
        create: bool = False,
        interval_s: float | None = None,
        checkpoint: tuple[bool, str | None] = (False, None),
    ) -> GuaranteeReport:
        """The guarantee, then every precondition checked live: the sink's own, the dedup
        catalog's Redis, the trigger interval, and the head against the Spark checkpoint
        (``checkpoint`` = (readable, the id in its ``metadata`` file or None)). Nothing is
        created unless ``create``: then the sink's preflight creates what a start would."""
        from exactlyonce.connectors.base.redis_health import catalog_checks

        checks: list[Check] = []
        if create:
            checks += checked("create", self._create_for_check)
        checks += self.preconditions()
        if self.dedup_config is not None:
            checks += catalog_checks(self.dedup_config, self.unique_sink)
        checks.append(trigger_check(self.check_trigger, interval_s))
        known, checkpoint_id = checkpoint
        checks += checked(
            "head and checkpoint", lambda: head_check(self.peek_head(), checkpoint_id, known)
        )
        report = GuaranteeReport(self.sink_name, self.guarantee(), checks)
        report.parts = self.report_parts()
        return report.scrubbed(self.output_secrets())

    def _create_for_check(self) -> Check:
        self.preflight()
        return Check("create", OK, "the sink's preflight created what a start creates")

    def output_secrets(self) -> list[str]:
        catalog = self.dedup_config.redis_url if self.dedup_config is not None else ""
        return [*self.config.secrets(), dsn_password(catalog) or ""]

    # -- the protocol ------------------------------------------------------------------

    @final
    def __call__(self, df: DataFrame, batch_id: int) -> None:
        """The ``foreachBatch`` entry: Spark calls it in the driver once per micro-batch,
        with the batch and its ``batchId`` (the epoch). Runs the protocol
        (:meth:`run_epoch`) with the writes in executor tasks; a skipped epoch's plan still
        runs into Spark's ``noop`` sink (:func:`run_without_writing`)."""
        query_id = spark_query_id(df, self.query_name)
        self._check_workers(df, query_id)
        self.prepare_batch(df.schema)
        report = self.run_epoch(
            batch_id,
            query_id,
            df.schema,
            default_shards=lambda: default_parallelism(df.sparkSession),
            write=lambda epoch, shards: self._write_epoch(df, epoch, shards),
        )
        share_report(df.sparkSession, report)  # under Spark Connect: for the client
        if report.skipped:
            run_without_writing(df)

    def prepare_batch(self, schema: StructType) -> None:
        """A hook run by :meth:`__call__` before each batch's protocol (default: nothing):
        for a sink with a part that may come up after the query started."""
        return None

    def report_parts(self) -> list[GuaranteeReport]:
        """Reports of further parts the sink's guarantee rests on (default: none), shown
        after its own by :meth:`guarantee_report` (a buffer: the drain into the sink)."""
        return []

    @final
    def _check_workers(self, df: DataFrame, query_id: str | None) -> None:
        """Once per start (a new Spark query id) of this sink object, before the first batch:
        can Spark's Python workers import exactlyonce? (:mod:`.workers`; ConfigError if not.)"""
        if "worker_probe" in self.__dict__ and self.__dict__["_workers_for"] == query_id:
            return
        from exactlyonce.connectors.base.workers import check_workers

        self.worker_probe = check_workers(df.sparkSession)
        self.__dict__["_workers_for"] = query_id

    @final
    def run_epoch(
        self,
        batch_id: int,
        query_id: str | None,
        schema: StructType,
        default_shards: Callable[[], int],
        write: Callable[[int, int], list[TaskResult]],
    ) -> BatchReport:
        """The protocol for one epoch; ``write(epoch, shards)`` runs the tasks.

        ``__call__`` passes Spark's executor tasks; tests of the protocol may pass tasks run
        in-process on the same task writers.
        """
        began = time.monotonic()
        head = self._start(schema, default_shards, query_id)
        if head.covers(batch_id):
            self._record(BatchReport(self.query_name, self.sink_name, batch_id, skipped=True))
            return self.reports[-1]
        crash_point("before_write", batch_id)
        rebuilds_before = self._keeper.rebuilds if self._keeper else 0
        tasks = self._write_with_retries(write, batch_id, head)
        self.head_store().advance_head(batch_id, query_id)
        self._head = Head(batch_id, query_id, head.num_shards)
        if self._keeper is not None:
            self._keeper.after_head(batch_id)
        crash_point("after_head", batch_id)
        report = BatchReport.from_tasks(self.query_name, self.sink_name, batch_id, tasks)
        report.seconds = time.monotonic() - began
        if self._keeper is not None:
            report.catalog_rebuilds = self._keeper.rebuilds - rebuilds_before
            usage = self._keeper.usage(batch_id)
            if usage is not None:
                report.catalog_ids, report.catalog_bytes = usage.ids, usage.memory_bytes
        self._record(report)
        return report

    # -- the same steps for a driver of the protocol other than foreachBatch -------------
    # (exactlyonce.integration.datasource: Spark's data source API runs the tasks itself, and
    # calls back on the driver to commit each epoch)

    @final
    def start(
        self,
        schema: StructType,
        query_id: str | None,
        default_shards: Callable[[], int],
        *,
        checked_by_tasks: bool = False,
    ) -> Head:
        """Preflight, read and check the head, open the catalog: what the first epoch after a
        (re)start does. Call it once per query run, before any task writes.

        ``checked_by_tasks``: the caller's tasks see Spark's query id and refuse a head
        another checkpoint wrote themselves, before they write or skip anything (the data
        source path, whose driver sees the id only in a local checkpoint). A start without
        ``query_id`` then leaves the check to them instead of refusing."""
        return self._start(schema, default_shards, query_id, checked_by_tasks)

    @final
    def task_writer(self, epoch: int, columns: Sequence[str]) -> TaskWriter:
        """The picklable task writer of ``epoch`` (see :meth:`_task_writer`); after
        :meth:`start`, so that it carries the catalog the start opened."""
        return self._task_writer(epoch, columns)

    @final
    def commit_epoch(self, epoch: int, query_id: str | None) -> None:
        """Advance the head to ``epoch``: only after every task of it succeeded (step 5)."""
        self.head_store().advance_head(epoch, query_id)
        crash_point("after_head", epoch)

    @final
    def _write_with_retries(
        self, write: Callable[[int, int], list[TaskResult]], epoch: int, head: Head
    ) -> list[TaskResult]:
        """Write the epoch; after a failure, recover a lost catalog and try again.

        Shards that committed in a failed attempt are skipped by the next one, so a retry
        never writes twice. Anything but a lost or unreachable catalog is raised at once.
        """
        keeper = self._keeper

        def write_once() -> list[TaskResult]:
            if keeper is not None:
                keeper.ensure(head.epoch)
            return write(epoch, head.num_shards)

        def catalog_trouble(exc: BaseException) -> bool:
            if keeper is None or isinstance(exc, CatalogLostError):
                return False  # on_catalog_loss="fail", or a sink that cannot rebuild
            return keeper.recoverable()

        def on_retry(exc: BaseException, retry: int, wait_s: float) -> None:
            log.warning(
                "%s epoch %d: catalog lost or unreachable; recovering, retry %d in %.1fs",
                self,
                epoch,
                retry,
                wait_s,
            )

        policy = CATALOG_RETRY.replace(attempts=self.write_retries + 1)
        return policy.call(write_once, on_retry=on_retry, transient=catalog_trouble)

    @final
    def _start(
        self,
        schema: StructType,
        default_shards: Callable[[], int],
        query_id: str | None,
        checked_by_tasks: bool = False,
    ) -> Head:
        """Preflight and read the head once per (re)start of the query in this driver."""
        if self._head is not None and self._started_for == query_id:
            return self._head
        self.preflight(schema)
        store = self.head_store()
        head = store.read_head()
        if head is None:
            shards = self.shards or max(1, default_shards())
            mine = Head(NO_EPOCH, query_id, shards)
            store.create_head(mine)
            # The first create wins: another driver of this query_name may have created it
            # between the read and the create. Its head is the one to check.
            head = store.read_head() or mine
        elif query_id and not head.spark_query_id:
            store.bind_query_id(query_id)  # the first bind wins, as the first create does
            head = store.read_head() or Head(head.epoch, query_id, head.num_shards)
        checked = query_id is not None or not checked_by_tasks
        if checked:
            self._refuse_another_checkpoint(head, query_id)
            self._fence_earlier_writers(head)
        if self.shards is not None and self.shards != head.num_shards:
            log.warning(
                "%s: shards=%d ignored; this query was started with %d shards, kept so that "
                "re-runs put every ID in the same shard",
                self,
                self.shards,
                head.num_shards,
            )
        if self.dedup_config is not None:
            self._keeper = CatalogKeeper(
                self.dedup_config,
                self.query_name,
                self.sink_name,
                unique_sink=self.unique_sink,
                rebuild_source=self._rebuild_source(),
            )
            self._keeper.open(head.epoch, head.num_shards)
        self._head, self._started_for = head, query_id
        log.info("%s started: head epoch %d, %d shards", self, head.epoch, head.num_shards)
        return head

    @final
    def _refuse_another_checkpoint(self, head: Head, query_id: str | None) -> None:
        """:func:`refuse_another_checkpoint` with this sink's opt-out; a start the opt-out
        let through without an id over committed epochs is logged as a warning."""
        trust = self.config.allow_unknown_query_id
        refuse_another_checkpoint(self.sink_name, self.query_name, head, query_id, trust=trust)
        if query_id is None and not fresh(head):
            log.warning(
                "%s: started without Spark's query id over a head at epoch %d "
                "(allow_unknown_query_id): a deleted checkpoint would go unnoticed",
                self,
                head.epoch,
            )

    @final
    def _write_epoch(self, df: DataFrame, epoch: int, num_shards: int) -> list[TaskResult]:
        """Run the writes in executor tasks; only one small result row per task comes back."""
        from pyspark.sql import functions as F

        projected = self._project(df, epoch)
        columns = [c for c in projected.columns if not c.startswith("_eo_")]
        shard = F.pmod(F.hash(F.col(self.id_column)), F.lit(num_shards))
        with_shard = projected.withColumn(SHARD_COLUMN, shard)
        writer: TaskWriter = self._task_writer(epoch, columns)
        if self._writes_unaligned(df.schema):
            # No shuffle: each Spark partition is written as it is (see writes_unaligned).
            sharded = with_shard
            writer = UnalignedTasks(cast("ShardWriter[Any]", writer))
        else:
            sharded = with_shard.repartition(num_shards, F.col(self.id_column))
        if self.upsert is not None:
            sharded = sharded.sortWithinPartitions(*shard_order(self.id_column))
        elif self.sort_within_shard:
            sharded = sharded.sortWithinPartitions(self.id_column)
        rows = sharded.mapInArrow(writer, TASK_RESULT_SCHEMA).collect()
        return [TaskResult(**row.asDict()) for row in rows]

    @property
    def writes_unaligned(self) -> bool:
        """True when a second write of a record ID is a no-op in the destination itself and
        its task writer can write rows that are not one shard's (PostgreSQL ``mode="insert"``:
        its unique index on the record ID, COPY falling back to ``ON CONFLICT DO NOTHING``).
        Then an epoch whose records all have an ID skips the shuffle by ID: each Spark
        partition is written as it is, with no shard marker written or trusted (as on the
        Spark data source path, :meth:`ShardWriter.write_unaligned`); a re-run of a partly
        committed epoch writes every partition again, and each record already written is a
        no-op. The catalog still keys every ID by its shard, ``pmod(hash(id), shards)``."""
        return False

    def _writes_unaligned(self, schema: StructType) -> bool:
        """:attr:`writes_unaligned`, for a batch none of whose records can lack an ID (content
        IDs, or key columns Spark knows are never null): a record without an ID is
        dead-lettered, and only the shard path letters identical ones exactly once whatever
        the re-run's partitions."""
        if not self.writes_unaligned or self.upsert is not None:
            return False
        if self.ids.content:
            return True
        fields = {f.name: f for f in schema.fields}
        return all(c in fields and not fields[c].nullable for c in self.ids.columns)

    def _with_ids(self, df: DataFrame, epoch_column: str, epoch: int) -> DataFrame:
        """Add the record ID, the epoch, and for bad records the reason and payload; in
        upsert mode the tombstone column becomes ``_eo_delete``, and ``_eo_order`` is added."""
        from pyspark.sql import functions as F

        schema = df.schema
        names = tuple(schema.names)
        upsert = self.upsert

        def build() -> tuple[list[Column], list[Column]]:
            self._check_id_columns(names)
            before, after = id_expressions(self.ids, schema, self.id_column)
            if upsert is None:
                return before, after
            stored = set(upsert.stored_names(names))
            kept = [c for name, c in zip(names, before, strict=False) if name in stored]
            return [*kept, before[-1]], [*after, *upsert_expressions(upsert, names)]

        before, after = self._memo(("with_ids", schema.json(), epoch_column, upsert), build)
        return df.select(*before, F.lit(epoch).cast("long").alias(epoch_column), *after)

    def _memo(self, key: Hashable, build: Callable[[], MemoT]) -> MemoT:
        """``build()`` once per ``key`` (see :class:`ExpressionMemo`)."""
        memo: ExpressionMemo = self.__dict__.setdefault("_expressions", ExpressionMemo())
        return memo.get(key, build)

    @final
    def _record(self, report: BatchReport) -> None:
        """Keep ``report``, log its one line (``exactlyonce.batches``, see :mod:`.logs`) and
        hand it to the report listeners (:mod:`.observers`: metrics)."""
        self.reports.append(report)
        show_batches_by_default()
        line = batch_line(report)
        batch_log.info(
            "%s %s", self, line if report.skipped else f"{line}; {catalog_summary(report)}"
        )
        publish(report)
        if report.skipped:
            return
        warning = bloom_over_capacity(report, self.dedup_config)
        if warning is not None and not self.__dict__.get("_capacity_warned"):
            log.warning("%s %s", self, warning)  # once per sink object: not every epoch
            self.__dict__["_capacity_warned"] = True

    @property
    def last_report(self) -> BatchReport | None:
        return self.reports[-1] if self.reports else None

    def __repr__(self) -> str:
        return f"{type(self).__name__}(query_name={self.query_name!r}, sink={self.sink_name!r})"

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickled as its configuration. Spark Connect ships ``foreachBatch(sink)`` to the
        server, which runs it there: the copy is the sink its config builds (no preflight
        again), with its own connections, no cached head (it reads the head at the query's
        start, as any restart does) and its own ``reports``. Classic Spark never pickles the
        sink: it runs in the driver, and only its task writers go to the executors."""
        return (_rebuilt, (type(self), self.config, self._pickled_parts()))

    def _pickled_parts(self) -> dict[str, Any]:
        """What a copy needs besides the config (a test store); nothing by default."""
        return {}
