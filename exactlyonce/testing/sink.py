"""An exactly-once sink whose destination is a :class:`~exactlyonce.testing.store.MemoryStore`.

Guarantee: the same as :class:`~exactlyonce.connectors.postgres.PostgresSink`, by the same
mechanism, minus the database: the real protocol (:class:`ExactlyOnceSink`,
:class:`ShardTask`, the dedup catalog) runs unchanged; only the destination is a dict.

- ``mode="insert"`` (default) gives the table a unique index on ``record_id``: a re-written ID
  is skipped. ``mode="append"`` has none, so exactly-once rests on the head, the shard commits
  and the catalog alone, and a double write shows up as a duplicate row;
- a task keeps its rows and dead letters to itself until :meth:`MemoryShardTask._commit`
  adds them to the table together with its shard-commit markers, in one step;
- the head lives in the store (:class:`~exactlyonce.testing.store.MemoryHeadStore`).

Tasks run in the process that holds a :class:`MemoryStore`: run epochs with
:func:`exactlyonce.testing.run_in_process` (or ``sink.run_epoch`` with your own ``write``);
shipping such a task writer to Spark fails on pickling. With ``path`` (a
:class:`~exactlyonce.testing.store.FileStore`) Spark's Python workers on this machine reach the
store too: ``foreachBatch(sink)``, ``exactlyonce run`` and the buffer's drainer work on it, and
a pipeline file can name it (``type: memory`` once :data:`exactlyonce.testing.kind.KIND` is
registered; the ``exactlyonce.sinks`` entry point does that for every process).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import pyarrow as pa
from pydantic import model_validator

from exactlyonce.connectors.base import (
    DeadLetter,
    ExactlyOnceSink,
    ShardTask,
    ShardWriter,
    TaskWriter,
)
from exactlyonce.connectors.base.config import (
    UNSET,
    DedupSettings,
    IdFrom,
    Setting,
    Unset,
    field_error,
    given,
)
from exactlyonce.connectors.base.guarantee import OK, Check, CheckOf, Guarantee
from exactlyonce.connectors.postgres.config import Mode, TableSettings
from exactlyonce.dedup.catalog import DedupConfig
from exactlyonce.dedup.keeper import RebuildSource
from exactlyonce.dedup.shard import DedupPlan
from exactlyonce.errors import ConfigError
from exactlyonce.testing.store import FileStore, MemoryHeadStore, MemoryStore

if TYPE_CHECKING:
    from pyspark.sql import DataFrame
    from pyspark.sql.types import StructType


class MemorySinkConfig(TableSettings):
    """:class:`MemorySink`'s settings: a PostgreSQL sink's table rules (``mode``,
    ``id_column``, ``epoch_column``) over a :class:`MemoryStore` instead of a server."""

    type: Literal["memory"] = "memory"
    path: str | None = None
    """The file holding the store, shared by every process on this machine (Spark's
    workers, a drainer, an auditor); None: the :class:`MemoryStore` given to the
    constructor. A sink built from config alone (a pipeline file) needs it."""

    @property
    def destination(self) -> str:
        return self.table

    @model_validator(mode="after")
    def _no_upsert(self) -> MemorySinkConfig:
        if self.mode == "upsert":
            raise field_error("mode", "MemorySink writes modes 'insert' and 'append' only")
        return self


@dataclass(frozen=True)
class MemoryTarget:
    """What a task needs to write: the store, the table, and the dedup plan."""

    store: MemoryStore
    table: str
    columns: tuple[str, ...]
    id_column: str
    query_name: str
    sink_name: str
    dedup: DedupPlan | None = None


class MemoryShardTask(ShardTask):
    """One task's atomic write: rows wait in the task until :meth:`_commit`."""

    def __init__(self, target: MemoryTarget, epoch: int) -> None:
        super().__init__(epoch, target.id_column, target.columns, target.dedup)
        self.t = target
        self.pending: list[dict[str, Any]] = []
        self.letters: list[DeadLetter] = []

    def _open(self) -> set[int]:
        return self.t.store.committed_shards((self.t.query_name, self.t.sink_name), self.epoch)

    def _write_rows(self, rows: pa.RecordBatch) -> None:
        records = rows.to_pylist()
        self.t.store.count_attempts(r.get(self.t.id_column) for r in records)
        self.pending.extend(records)
        self.result.written += len(records)

    def _write_dead_letters(self, letters: Sequence[DeadLetter]) -> None:
        self.letters.extend(letters)

    def _commit(self, new_shards: Sequence[int]) -> None:
        """Rows, dead letters and shard markers in one step; refused whole if a shard of
        ``new_shards`` was committed meanwhile. Rows a unique index skips are duplicates."""
        key = (self.t.query_name, self.t.sink_name)
        inserted = self.t.store.commit(
            key, self.epoch, self.t.table, self.pending, self.letters, new_shards
        )
        skipped = len(self.pending) - inserted
        self.result.written -= skipped
        self.result.duplicates += skipped
        self.pending, self.letters = [], []

    def _close(self) -> None:
        self.pending, self.letters = [], []  # an uncommitted step never becomes visible


class MemoryShardWriter(ShardWriter[MemoryTarget]):
    """The task function of one epoch; it runs in the process that holds the store."""

    task_class = MemoryShardTask


def _guarantee(sink: MemorySink) -> Guarantee:
    return Guarantee(
        "EXACTLY ONCE (in this process's memory)",
        "each shard's rows and its commit marker go into the store in one step; a unique "
        "ID column (insert) or the dedup catalog (append) keeps re-writes out.",
    )


class MemorySink(ExactlyOnceSink):
    """Writes records into a :class:`MemoryStore` table exactly once; see the module docs."""

    kind = "memory"
    config: MemorySinkConfig
    table = Setting[str]()
    mode = Setting[Mode]()
    id_column = Setting[str]()
    epoch_column = Setting[str]()

    def __init__(
        self,
        store: MemoryStore | None,
        table: str,
        id_columns: Sequence[str] | str | None,
        query_name: str,
        *,
        id_from: IdFrom | Unset = UNSET,
        mode: Mode | Unset = UNSET,
        shards: int | None | Unset = UNSET,
        id_column: str | Unset = UNSET,
        epoch_column: str | Unset = UNSET,
        sink_name: str | None | Unset = UNSET,
        dedup: bool | DedupSettings | DedupConfig | Unset = UNSET,
        redis_url: str | None | Unset = UNSET,
        path: str | None | Unset = UNSET,
        allow_unknown_query_id: bool | Unset = UNSET,
    ) -> None:
        """Settings and their defaults: :class:`MemorySinkConfig` (no preflight here).
        ``store`` None: the :class:`FileStore` at ``path``."""
        if store is not None:
            self.store = store
        self._set_up(MemorySinkConfig(**given(locals(), ("self", "store"))), check=False)

    def _configure(self, config: MemorySinkConfig) -> None:
        if "store" not in self.__dict__:
            if config.path is None:
                raise ConfigError("path", "give the store's file (or a MemoryStore in Python)")
            self.store = FileStore(config.path)
        self.heads = MemoryHeadStore(self.store, self.query_name, self.sink_name)

    @property
    def unique_sink(self) -> bool:
        return self.mode == "insert"

    def _pickled_parts(self) -> dict[str, Any]:
        return {"store": self.store}  # a FileStore pickles as its path; a MemoryStore refuses

    def preflight(self, schema: StructType | None = None) -> None:
        """Create the table if missing; refuse ``mode="insert"`` on a table without a
        unique index, and a stream that lacks an ID column or reuses a column we add."""
        unique_on = self.id_column if self.mode == "insert" else None
        table = self.store.create_table(self.table, unique_on, self.id_column)
        if self.mode == "insert" and table.unique_on != self.id_column:
            raise ConfigError("table", f"{self.table} has no unique index on {self.id_column!r}")
        if schema is not None:
            reserved = [(self.id_column, "id_column"), (self.epoch_column, "epoch_column")]
            self._refuse_reserved_columns(schema.names, reserved, "; choose another name")
            self._check_id_columns(schema.names)

    def check(self) -> CheckOf[MemorySink]:
        return CheckOf(self, _guarantee, lambda sink: [Check("store", OK, "in-process memory")])

    # -- the head: kept by ``self.heads`` (a HeadStore), called by the protocol ---------

    def head_store(self) -> MemoryHeadStore:
        return self.heads

    # -- the write ---------------------------------------------------------------------

    def _project(self, df: DataFrame, epoch: int) -> DataFrame:
        return self._with_ids(df, self.epoch_column, epoch)

    def _task_writer(self, epoch: int, columns: Sequence[str]) -> TaskWriter:
        target = MemoryTarget(
            self.store,
            self.table,
            tuple(columns),
            self.id_column,
            self.query_name,
            self.sink_name,
            self.dedup_plan,
        )
        return MemoryShardWriter(target, epoch)

    def _rebuild_source(self) -> RebuildSource | None:
        """In append mode, the table's own IDs from an epoch on rebuild a lost catalog."""
        if self.mode != "append":
            return None

        def read(from_epoch: int) -> Iterator[tuple[Any, Any]]:
            import numpy as np

            rows = [r for r in self.store.rows(self.table) if r[self.epoch_column] >= from_epoch]
            if rows:
                yield (
                    np.array([r[self.id_column] for r in rows], dtype="S32"),
                    np.array([r[self.epoch_column] for r in rows], dtype=np.int64),
                )

        return read
