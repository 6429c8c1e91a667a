"""The sink contract shared by every connector.

A sink is a ``foreachBatch`` callable. Spark calls it in the driver once per micro-batch with
the batch's DataFrame and its ``batchId`` (our *epoch*). The sink object holds configuration
only; connections open inside executor tasks (the object built by :meth:`_task_writer` is
pickled to them) or briefly in the driver for the head.

The protocol, in the order it runs (DESIGN.md, "One batch, in order"):

1. On the first call after a (re)start, :meth:`_start` preflights the destination, reads the
   sink head back from it, and checks the head belongs to this Spark checkpoint.
2. An epoch at or below the head is skipped whole, without touching the destination.
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
import os
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Hashable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic, TypeVar, cast

from exactlyonce.dedup.catalog import DedupConfig
from exactlyonce.dedup.ids import RecordIdSpec
from exactlyonce.dedup.keeper import CatalogKeeper, RebuildSource
from exactlyonce.dedup.shard import DedupPlan
from exactlyonce.errors import CatalogLostError, CheckpointResetError, ConfigError
from exactlyonce.faults import crash_point

MemoT = TypeVar("MemoT")

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import Column, DataFrame
    from pyspark.sql.types import StructType

    from exactlyonce.connectors.task import ShardTask

log = logging.getLogger("exactlyonce")

SHARD_COLUMN = "_eo_shard"
ERROR_COLUMN = "_eo_error"
PAYLOAD_COLUMN = "_eo_payload"
NO_EPOCH = -1

DEDUP_COUNTERS = (
    "ids_checked",
    "task_repeats",
    "bloom_negatives",
    "catalog_lookups",
    "catalog_duplicates",
    "bloom_false_positives",
)
# What each task counts and the driver sums over the tasks of an epoch, besides dedup's.
TASK_COUNTERS = ("rows", "written", "duplicates", "dead_letters", "slow_batches")
TASK_RESULT_SCHEMA = (
    "shards array<int>, skipped_shards array<int>, "
    + "".join(f"{name} long, " for name in TASK_COUNTERS)
    + "writer string, "
    + ", ".join(f"{name} long" for name in DEDUP_COUNTERS)
)

TaskWriter = Callable[["Iterator[pa.RecordBatch]"], "Iterator[pa.RecordBatch]"]


@dataclass(frozen=True)
class Head:
    """What the destination durably says was committed for one (query, sink)."""

    epoch: int
    spark_query_id: str | None
    num_shards: int


@dataclass
class TaskResult:
    """What one executor task reports back; rows of data never travel to the driver."""

    shards: list[int] = field(default_factory=list)
    skipped_shards: list[int] = field(default_factory=list)
    rows: int = 0
    written: int = 0
    duplicates: int = 0
    dead_letters: int = 0
    slow_batches: int = 0
    writer: str = ""
    ids_checked: int = 0
    task_repeats: int = 0
    bloom_negatives: int = 0
    catalog_lookups: int = 0
    catalog_duplicates: int = 0
    bloom_false_positives: int = 0

    def add_dedup_stats(self, stats: object) -> None:
        for name in DEDUP_COUNTERS:
            setattr(self, name, getattr(self, name) + int(getattr(stats, name)))

    def to_arrow(self) -> pa.RecordBatch:
        import pyarrow as pa

        fields = [
            ("shards", pa.list_(pa.int32())),
            ("skipped_shards", pa.list_(pa.int32())),
            *((name, pa.int64()) for name in TASK_COUNTERS),
            ("writer", pa.string()),
            *((name, pa.int64()) for name in DEDUP_COUNTERS),
        ]
        return pa.RecordBatch.from_pylist([self.__dict__], schema=pa.schema(fields))


@dataclass
class BatchReport:
    """What one call of the sink did. ``skipped`` means the epoch was at or below the head."""

    query_name: str
    sink: str
    epoch: int
    skipped: bool
    rows: int = 0
    written: int = 0
    duplicates: int = 0
    dead_letters: int = 0
    shards_committed: int = 0
    shards_skipped: int = 0
    slow_batches: int = 0
    writers: list[str] = field(default_factory=list)
    seconds: float = 0.0
    ids_checked: int = 0
    task_repeats: int = 0
    bloom_negatives: int = 0
    catalog_lookups: int = 0
    catalog_duplicates: int = 0
    bloom_false_positives: int = 0
    catalog_rebuilds: int = 0

    @property
    def observed_fp_rate(self) -> float:
        """Bloom 'maybe's the catalog denied, over the IDs that were new to the catalog."""
        new = self.bloom_negatives + self.bloom_false_positives
        return self.bloom_false_positives / new if new else 0.0

    @classmethod
    def from_tasks(
        cls, query_name: str, sink: str, epoch: int, tasks: Sequence[TaskResult]
    ) -> BatchReport:
        report = cls(query_name, sink, epoch, skipped=False)
        for t in tasks:
            for name in (*TASK_COUNTERS, *DEDUP_COUNTERS):
                setattr(report, name, getattr(report, name) + getattr(t, name))
            report.shards_committed += len(t.shards) - len(t.skipped_shards)
            report.shards_skipped += len(t.skipped_shards)
            if t.writer:
                report.writers.append(t.writer)
        return report


def bloom_over_capacity(report: BatchReport, config: DedupConfig | None) -> str | None:
    """A warning when an epoch's Bloom filters answered "maybe" far more often than
    ``fp_rate`` allows: they hold more IDs than ``expected_ids`` sized them for, and every
    false "maybe" costs a catalog lookup (a 1M-row epoch with the defaults: 53% of the new IDs
    looked up, about 1.4 s of Redis per shard). None when the rate is as configured."""
    if config is None or report.catalog_lookups < 1000:
        return None
    rate = report.observed_fp_rate
    if rate <= max(0.01, 10 * config.fp_rate):
        return None
    return (
        f"epoch {report.epoch}: {rate:.1%} of the new IDs were Bloom false positives (fp_rate "
        f"{config.fp_rate:g}), so they were looked up in the catalog: the filters are over "
        f"capacity. Raise expected_ids (now {config.expected_ids:,}) to the distinct IDs the "
        f"query writes in retention_epochs={config.retention_epochs} epochs; it takes effect "
        "for a new catalog (a new query_name, or after a head reset)"
    )


def resolve_dedup(dedup: bool | DedupConfig, redis_url: str | None) -> DedupConfig | None:
    """Dedup is on by default; it needs the catalog's Redis (argument or environment)."""
    if isinstance(dedup, DedupConfig):
        return dedup
    if dedup is False:
        return None
    if dedup is not True:
        raise ConfigError("dedup", f"must be True, False or a DedupConfig, got {dedup!r}")
    url = redis_url or os.environ.get("EXACTLYONCE_REDIS_URL")
    if not url:
        raise ConfigError(
            "redis_url",
            "dedup is on by default and needs the catalog's Redis: pass redis_url=... or set "
            "EXACTLYONCE_REDIS_URL, or turn dedup off with dedup=False",
        )
    return DedupConfig(redis_url=url)


def require_text(field: str, value: object, message: str) -> None:
    """Refuse anything but a string holding more than white space."""
    if not isinstance(value, str) or not value.strip():
        raise ConfigError(field, message)


def require_one_of(field: str, value: object, choices: Sequence[str]) -> None:
    """Refuse a value that is not one of ``choices``."""
    if value not in choices:
        raise ConfigError(field, f"must be one of {list(choices)}, got {value!r}")


def require_distinct(field: str, value: str, other_field: str, other: str) -> None:
    """Refuse a column name equal to another one the sink writes."""
    if value == other:
        raise ConfigError(field, f"must differ from {other_field}")


def _check_shards(shards: int | None) -> None:
    if shards is not None and (not isinstance(shards, int) or not 1 <= shards <= 4096):
        raise ConfigError("shards", f"must be an integer from 1 to 4096, got {shards!r}")


def _catalog_unreachable(keeper: CatalogKeeper) -> bool:
    try:
        keeper.catalog.redis.ping()
    except Exception:
        return True
    return False


def spark_query_id(df: DataFrame) -> str | None:
    """The streaming query's id: stable across restarts from one checkpoint, new for a new one."""
    try:
        value = df.sparkSession.sparkContext.getLocalProperty("sql.streaming.queryId")
    except Exception:  # Spark Connect has no SparkContext
        return None
    return str(value) if value else None


class ExactlyOnceSink(ABC):
    """A ``foreachBatch`` callable that writes each record of a stream exactly once.

    Subclasses say how to reach their destination: preflight, the head, and the task writer.
    """

    kind: str = "sink"
    # Sort each shard by record ID before the write: B-tree inserts into a unique index then
    # walk the tree in order (PostgreSQL). Sinks without an ordered index leave it off.
    sort_within_shard: bool = False

    def __init__(
        self,
        *,
        query_name: str,
        id_columns: Sequence[str] | str,
        shards: int | None = None,
        sink_name: str | None = None,
        dedup: bool | DedupConfig = True,
        redis_url: str | None = None,
        write_retries: int = 3,
    ) -> None:
        require_text("query_name", query_name, "a stable, non-empty name for the streaming query")
        _check_shards(shards)
        self.query_name = query_name
        self.ids = RecordIdSpec.from_columns(id_columns)
        self.shards = shards
        self._sink_name = sink_name
        self._head: Head | None = None
        self._started_for: str | None = None
        self.reports: list[BatchReport] = []
        self.dedup_config = resolve_dedup(dedup, redis_url)
        self.write_retries = write_retries
        self._keeper: CatalogKeeper | None = None

    # -- checks the sinks share -------------------------------------------------------

    def _require_catalog(self, reason: str) -> None:
        """Refuse ``dedup=False`` where only the catalog keeps the writes exactly-once."""
        if self.dedup_config is None:
            raise ConfigError("dedup", reason)

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

    @property
    @abstractmethod
    def sink_name(self) -> str:
        """The head's key together with ``query_name``: names the destination."""

    @abstractmethod
    def preflight(self, schema: StructType | None = None) -> None:
        """Check the destination before writing; raise ConfigError/SinkUnavailableError."""

    def check_trigger(self, interval_s: float | None) -> None:
        """Refuse a trigger interval the sink cannot serve (ConfigError); most can serve any."""
        return None

    @abstractmethod
    def head(self) -> Head | None:
        """The committed head as the destination has it now; None before the first epoch."""

    @abstractmethod
    def reset_head(self) -> None:
        """Forget what this query committed (not the data): for a deliberate fresh start."""

    @abstractmethod
    def _read_head(self) -> Head | None: ...

    @abstractmethod
    def _create_head(self, head: Head) -> None: ...

    @abstractmethod
    def _bind_query_id(self, spark_query_id: str) -> None: ...

    @abstractmethod
    def _advance_head(self, epoch: int, spark_query_id: str | None) -> None: ...

    @abstractmethod
    def _project(self, df: DataFrame, epoch: int) -> DataFrame:
        """The destination's columns, cast to what its task writer expects."""

    @abstractmethod
    def _task_writer(self, epoch: int, columns: Sequence[str]) -> TaskWriter: ...

    @property
    def unique_sink(self) -> bool:
        """True when the destination itself refuses a second copy of an ID."""
        return True

    def _rebuild_source(self) -> RebuildSource | None:
        """The sink's own recent IDs, to rebuild a lost catalog; None if it cannot list them."""
        return None

    @property
    def dedup_plan(self) -> DedupPlan | None:
        return self._keeper.plan if self._keeper is not None else None

    # -- the protocol ------------------------------------------------------------------

    def __call__(self, df: DataFrame, batch_id: int) -> None:
        self.run_epoch(
            batch_id,
            spark_query_id(df),
            df.schema,
            default_shards=lambda: df.sparkSession.sparkContext.defaultParallelism,
            write=lambda epoch, shards: self._write_epoch(df, epoch, shards),
        )

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
        if batch_id <= head.epoch:
            self._record(BatchReport(self.query_name, self.sink_name, batch_id, skipped=True))
            log.info(
                "%s epoch %d <= head %d: already committed, skipped", self, batch_id, head.epoch
            )
            return self.reports[-1]
        crash_point("before_write", batch_id)
        rebuilds_before = self._keeper.rebuilds if self._keeper else 0
        tasks = self._write_with_retries(write, batch_id, head)
        self._advance_head(batch_id, query_id)
        self._head = Head(batch_id, query_id, head.num_shards)
        if self._keeper is not None:
            self._keeper.after_head(batch_id)
        crash_point("after_head", batch_id)
        report = BatchReport.from_tasks(self.query_name, self.sink_name, batch_id, tasks)
        report.seconds = time.monotonic() - began
        report.catalog_rebuilds = (self._keeper.rebuilds if self._keeper else 0) - rebuilds_before
        self._record(report)
        return report

    def _write_with_retries(
        self, write: Callable[[int, int], list[TaskResult]], epoch: int, head: Head
    ) -> list[TaskResult]:
        """Write the epoch; after a failure, recover a lost catalog and try again.

        Shards that committed in a failed attempt are skipped by the next one, so a retry
        never writes twice. Anything but a lost or unreachable catalog is raised at once.
        """
        for attempt in range(self.write_retries + 1):
            try:
                if self._keeper is not None:
                    self._keeper.ensure(head.epoch)
                return write(epoch, head.num_shards)
            except CatalogLostError:
                raise  # on_catalog_loss="fail", or a sink that cannot rebuild
            except Exception:
                if self._keeper is None or attempt == self.write_retries:
                    raise
                if not self._keeper.lost() and not _catalog_unreachable(self._keeper):
                    raise
                log.warning(
                    "%s epoch %d: catalog lost or unreachable; recovering, retry %d",
                    self,
                    epoch,
                    attempt + 1,
                )
                time.sleep(min(10.0, 0.5 * 2**attempt))
        raise AssertionError("unreachable")

    def _start(
        self, schema: StructType, default_shards: Callable[[], int], query_id: str | None
    ) -> Head:
        """Preflight and read the head once per (re)start of the query in this driver."""
        if self._head is not None and self._started_for == query_id:
            return self._head
        self.preflight(schema)
        head = self._read_head()
        if head is None:
            shards = self.shards or max(1, default_shards())
            head = Head(NO_EPOCH, query_id, shards)
            self._create_head(head)
        elif query_id and head.spark_query_id and head.spark_query_id != query_id:
            raise CheckpointResetError(
                f"{self.sink_name}: the head of query_name {self.query_name!r} was written by "
                f"Spark query {head.spark_query_id}, but this run is query {query_id} (a new or "
                "deleted checkpoint). Its epochs would restart at 0 and be skipped as already "
                "committed. Use a new query_name, or reset the head explicitly with "
                f"`exactlyonce reset-head` / sink.reset_head() if you mean to start over."
            )
        elif query_id and not head.spark_query_id:
            self._bind_query_id(query_id)
            head = Head(head.epoch, query_id, head.num_shards)
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

    def _write_epoch(self, df: DataFrame, epoch: int, num_shards: int) -> list[TaskResult]:
        """Run the writes in executor tasks; only one small result row per task comes back."""
        from pyspark.sql import functions as F

        projected = self._project(df, epoch)
        columns = [c for c in projected.columns if not c.startswith("_eo_")]
        shard = F.pmod(F.hash(F.col(self.id_column)), F.lit(num_shards))
        sharded = projected.withColumn(SHARD_COLUMN, shard).repartition(
            num_shards, F.col(self.id_column)
        )
        if self.sort_within_shard:
            sharded = sharded.sortWithinPartitions(self.id_column)
        writer = self._task_writer(epoch, columns)
        rows = sharded.mapInArrow(writer, TASK_RESULT_SCHEMA).collect()
        return [TaskResult(**row.asDict()) for row in rows]

    def _with_ids(self, df: DataFrame, epoch_column: str, epoch: int) -> DataFrame:
        """Add the record ID, the epoch, and for bad records the reason and payload."""
        from pyspark.sql import functions as F

        names = tuple(df.columns)
        before, after = self._memo(
            ("with_ids", names, epoch_column), lambda: self._id_expressions(names)
        )
        return df.select(*before, F.lit(epoch).cast("long").alias(epoch_column), *after)

    def _id_expressions(self, names: Sequence[str]) -> tuple[list[Column], list[Column]]:
        """The columns before and after the epoch in :meth:`_with_ids`."""
        from pyspark.sql import functions as F

        self._check_id_columns(names)
        rid = self.ids.column()
        user_columns = [F.col(c) for c in names]
        payload = F.to_json(F.struct(*user_columns), {"ignoreNullFields": "false"})
        return [*user_columns, rid.alias(self.id_column)], [
            F.when(rid.isNull(), self.ids.null_key_reason()).alias(ERROR_COLUMN),
            F.when(rid.isNull(), payload).alias(PAYLOAD_COLUMN),
        ]

    def _memo(self, key: Hashable, build: Callable[[], MemoT]) -> MemoT:
        """``build()``, kept per ``key`` (a schema): Spark column expressions are unresolved,
        so the next epoch's DataFrame of the same schema reuses them. Building them anew
        cost about 250 py4j round trips (0.1-0.2 s) per epoch in the driver."""
        memo: dict[Hashable, Any] = self.__dict__.setdefault("_expressions", {})
        if key not in memo:
            if len(memo) >= 16:  # a schema that keeps changing: do not grow without bound
                memo.clear()
            memo[key] = build()
        return cast("MemoT", memo[key])

    @property
    @abstractmethod
    def id_column(self) -> str: ...

    def _record(self, report: BatchReport) -> None:
        self.reports.append(report)
        if not report.skipped:
            log.info(
                "%s epoch %d: %d rows, %d written, %d duplicates, %d dead letters, "
                "%d shards committed, %d skipped (%.2fs)",
                self,
                report.epoch,
                report.rows,
                report.written,
                report.duplicates,
                report.dead_letters,
                report.shards_committed,
                report.shards_skipped,
                report.seconds,
            )
            warning = bloom_over_capacity(report, self.dedup_config)
            if warning is not None and not self.__dict__.get("_capacity_warned"):
                log.warning("%s %s", self, warning)  # once per sink object: not every epoch
                self.__dict__["_capacity_warned"] = True

    @property
    def last_report(self) -> BatchReport | None:
        return self.reports[-1] if self.reports else None

    def __repr__(self) -> str:
        return f"{type(self).__name__}(query_name={self.query_name!r}, sink={self.sink_name!r})"

    def __getstate__(self) -> dict[str, Any]:
        raise TypeError(
            f"{type(self).__name__} runs in the driver as a foreachBatch callable and is not "
            "shipped to executors; its task writers are"
        )


TargetT = TypeVar("TargetT")


class ShardWriter(ABC, Generic[TargetT]):
    """The ``mapInArrow`` function of one epoch. Spark pickles it to every task."""

    def __init__(self, target: TargetT, epoch: int) -> None:
        self.target = target
        self.epoch = epoch

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        yield self._task().run(batches).to_arrow()

    @abstractmethod
    def _task(self) -> ShardTask:
        """The task that writes this epoch's shard in this executor."""
