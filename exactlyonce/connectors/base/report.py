"""What a task reports back to the driver, and what one call of a sink did.

Rows of data never travel to the driver: each executor task returns one small result row
(:class:`TaskResult`, through ``mapInArrow``) and the driver sums them into a
:class:`BatchReport`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from exactlyonce.dedup.catalog import DedupConfig

if TYPE_CHECKING:
    import pyarrow as pa

DEDUP_COUNTERS = (
    "ids_checked",
    "task_repeats",
    "bloom_negatives",
    "catalog_lookups",
    "catalog_duplicates",
    "bloom_false_positives",
)
# What each task counts and the driver sums over the tasks of an epoch, besides dedup's.
# mode="upsert": ``stale`` writes the epoch guard refused (a newer epoch is stored for the
# key), ``deleted`` tombstones applied; ``written`` counts the upserts that applied.
TASK_COUNTERS = (
    "rows",
    "written",
    "duplicates",
    "dead_letters",
    "slow_batches",
    "stale",
    "deleted",
)
TASK_RESULT_SCHEMA = (
    "shards array<int>, skipped_shards array<int>, "
    + "".join(f"{name} long, " for name in TASK_COUNTERS)
    + "writer string, "
    + ", ".join(f"{name} long" for name in DEDUP_COUNTERS)
)


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
    stale: int = 0
    deleted: int = 0
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
        """One row, built from raw buffers: ``from_pylist`` would import pandas (see
        :mod:`.arrays`), about 1.3 s in a fresh worker."""
        import pyarrow as pa

        from exactlyonce.connectors.base.arrays import int32_lists, int64s, strings

        columns = [
            ("shards", int32_lists([self.shards])),
            ("skipped_shards", int32_lists([self.skipped_shards])),
            *((name, int64s([getattr(self, name)])) for name in TASK_COUNTERS),
            ("writer", strings([self.writer])),
            *((name, int64s([getattr(self, name)])) for name in DEDUP_COUNTERS),
        ]
        return pa.RecordBatch.from_arrays([a for _, a in columns], names=[n for n, _ in columns])


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
    stale: int = 0
    deleted: int = 0
    writers: list[str] = field(default_factory=list)
    seconds: float = 0.0
    ids_checked: int = 0
    task_repeats: int = 0
    bloom_negatives: int = 0
    catalog_lookups: int = 0
    catalog_duplicates: int = 0
    bloom_false_positives: int = 0
    catalog_rebuilds: int = 0
    # The catalog after the epoch (its live generations): IDs it can still recognise and
    # their Redis memory; None without dedup, or when Redis did not answer.
    catalog_ids: int | None = None
    catalog_bytes: int | None = None

    @property
    def catalog_bytes_per_id(self) -> float | None:
        if self.catalog_ids and self.catalog_bytes is not None:
            return self.catalog_bytes / self.catalog_ids
        return None

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


def batch_line(report: BatchReport) -> str:
    """What one batch did, in one line: ``epoch 7: 1000 rows, 990 written, 10 duplicates,
    0 dead letters, 1.25 s, 800 rows/s`` (upserts add the stale and deleted counts)."""
    if report.skipped:
        return f"epoch {report.epoch}: already committed (at or below the head), skipped"
    rate = report.rows / report.seconds if report.seconds > 0 else 0.0
    upserts = (
        f", {report.stale} stale, {report.deleted} deleted"
        if report.stale or report.deleted
        else ""
    )
    return (
        f"epoch {report.epoch}: {report.rows} rows, {report.written} written, "
        f"{report.duplicates} duplicates, {report.dead_letters} dead letters{upserts}, "
        f"{report.seconds:.2f} s, {rate:.{0 if rate >= 10 else 2}f} rows/s"
    )


def catalog_summary(report: BatchReport) -> str:
    """The catalog part of the batch's log line: ``catalog 12,345 IDs, 1.2 MB (98 B/ID)``."""
    if report.catalog_ids is None or report.catalog_bytes is None:
        return "catalog -"
    per_id = report.catalog_bytes_per_id
    return f"catalog {report.catalog_ids:,} IDs, {report.catalog_bytes / 1e6:.1f} MB" + (
        f" ({per_id:.0f} B/ID)" if per_id is not None else ""
    )


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
