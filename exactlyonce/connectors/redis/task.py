"""The executor side: one task's shard of an epoch, written to Redis in one atomic step.

A task collects its records as JSON chunks (``pipeline_size`` records, at most
:data:`MAX_INLINE_BYTES` each). Chunks that do not fit in one call are staged first into
``<prefix>:stage:<epoch>:<attempt>`` (numbered, so a re-send is idempotent); then the apply
script (``scripts/apply.lua``) checks the head and the shard markers, writes the markers,
applies every record and dead letter, and drops the staging, all at once on the server.
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import pyarrow as pa
import redis

from exactlyonce.connectors.base import DeadLetter, ShardTask, ShardWriter
from exactlyonce.connectors.base.columns import DELETE_COLUMN
from exactlyonce.connectors.base.upsert import UpsertSpec
from exactlyonce.connectors.redis import lua
from exactlyonce.connectors.redis.connection import BUSY_POLICY, connect, patient, script_error
from exactlyonce.connectors.redis.template import KeyTemplate
from exactlyonce.dedup.shard import DedupPlan
from exactlyonce.faults import crash_point
from exactlyonce.retry import RetryPolicy
from exactlyonce.secrets import Secret

VALUE_COLUMN = "_redis_value"  # string mode: the record as JSON, built by Spark
MAX_INLINE_BYTES = 8 << 20  # per chunk too: a bigger chunk of big records is split
STAGING_TTL_MS = 86_400_000
# Crash tests that arm ``mid_write`` set this: tasks then stage in small chunks, the same path
# a task of more than ``pipeline_size`` records takes (PostgreSQL's COPY chunk size likewise).
STAGE_ROWS_ENV = "EXACTLYONCE_CRASH_PIPELINE_SIZE"


def staged_rows(pipeline_size: int) -> int:
    """Records per chunk: ``pipeline_size``, or a crash test's smaller one."""
    return int(os.environ.get(STAGE_ROWS_ENV) or pipeline_size)


T = TypeVar("T")


@dataclass(frozen=True)
class RedisTarget:
    """Everything a task needs to write; picklable, holds no connection."""

    url: Secret
    write: str
    template: KeyTemplate
    columns: tuple[str, ...]
    fields: tuple[str, ...]
    id_field: str
    epoch_field: str
    ttl_ms: int | None
    pipeline_size: int
    prefix: str
    query_name: str
    sink_name: str
    num_shards: int
    socket_timeout: float
    connect_timeout: float
    retries: int
    dedup: DedupPlan | None = None
    busy: RetryPolicy = BUSY_POLICY
    upsert: UpsertSpec | None = None
    # Control namespaces a rendered key may fall into: such a record is refused by the
    # script (a dead letter), never written (RedisSinkConfig.guarded_namespaces).
    guarded: tuple[str, ...] = ()

    @property
    def tombstone_prefix(self) -> str:
        """Upsert, hash writes: ``<prefix>:tomb:<key>`` holds the epoch that deleted ``key``."""
        return f"{self.prefix}:tomb:"

    @property
    def epoch_prefix(self) -> str:
        """Upsert, string writes: ``<prefix>:epoch:<key>`` holds the epoch of ``key``'s last
        write or delete (a string value carries no field to keep it in)."""
        return f"{self.prefix}:epoch:"


class RedisShardTask(ShardTask):
    """One task's atomic step: chunks inline or staged, then one apply script."""

    def __init__(self, target: RedisTarget, epoch: int) -> None:
        upsert = target.upsert is not None
        super().__init__(epoch, target.id_field, target.columns, target.dedup, upsert=upsert)
        self.t = target
        self.r: Any = None
        self.token = f"{self.result.writer}:{uuid.uuid4().hex[:12]}"
        self.stage_key = f"{target.prefix}:stage:{epoch}:{uuid.uuid4().hex}"
        self.letters = 0
        self.pending: list[bytes] = []
        self.pending_rows = 0
        self.pending_bytes = 0
        self.staged = 0
        self.status: int | None = None  # of the apply script: see scripts/apply.lua

    def _patient(self, call: Callable[[], T]) -> T:
        return patient(call, self.t.busy)

    def _open(self) -> set[int]:
        """Connect; the shards of this epoch already committed (all of them if the head passed
        the epoch). A missing head is refused: the sink's Redis lost its data."""
        self.r = connect(
            self.t.url,
            retries=self.t.retries,
            socket_timeout=self.t.socket_timeout,
            connect_timeout=self.t.connect_timeout,
        )

        def read() -> list[Any]:
            pipe = self.r.pipeline(transaction=True)
            pipe.hget(f"{self.t.prefix}:head", "epoch")
            pipe.hkeys(f"{self.t.prefix}:done:{self.epoch}")
            return list(pipe.execute())

        head, done = self._patient(read)
        if head is None:
            raise script_error(redis.ResponseError("EO_HEAD_LOST"), "the sink")
        if int(head) >= self.epoch:  # a late attempt: the epoch is committed whole
            return set(range(self.t.num_shards))
        return {int(s) for s in done if s.isdigit()}

    def _write_rows(self, rows: pa.RecordBatch) -> None:
        """Encode ``rows`` into chunks of ``pipeline_size`` records; a task with more than
        that stages chunks as it goes (the ``mid_write`` crash point fires after each stage,
        armed or not the same path: a task that never stages never reaches it)."""
        size = self.t.pipeline_size
        for start in range(0, rows.num_rows, size):
            self._add_encoded(rows.slice(start, size))

    def _add_encoded(self, rows: pa.RecordBatch) -> None:
        chunk = self._encode(rows)
        if len(chunk) > MAX_INLINE_BYTES and rows.num_rows > 1:  # big records: smaller chunks
            half = rows.num_rows // 2
            self._add_encoded(rows.slice(0, half))
            self._add_encoded(rows.slice(half))
            return
        self._add(chunk, rows.num_rows)

    def _encode(self, rows: pa.RecordBatch) -> bytes:
        deletes = rows.column(DELETE_COLUMN).to_pylist() if self.t.upsert is not None else None
        return encode_records(
            rows, self.t.template, self.t.write, self.t.fields, self.t.id_field, deletes=deletes
        )

    def _write_dead_letters(self, letters: Sequence[DeadLetter]) -> None:
        rows = [[d.epoch, d.shard, d.record_id, d.error, d.payload] for d in letters]
        self.letters += len(rows)
        self._add(_dumps(["d", rows]), len(rows))

    def _add(self, chunk: bytes, rows: int) -> None:
        if self.pending and (
            self.pending_rows + rows > self.t.pipeline_size
            or self.pending_bytes + len(chunk) > MAX_INLINE_BYTES
        ):
            self._stage()
        self.pending.append(chunk)
        self.pending_rows += rows
        self.pending_bytes += len(chunk)

    def _stage(self) -> None:
        """Send the pending chunks to the staging hash (numbered: a re-send is idempotent).

        Staged chunks are not applied until the apply script runs; a task killed after this
        leaves them to expire, or to the driver's advance script to drop.
        """
        first = self.staged + 1

        def send() -> list[Any]:
            pipe = self.r.pipeline(transaction=False)
            pipe.sadd(f"{self.t.prefix}:stages", self.stage_key)
            for n, chunk in enumerate(self.pending, start=first):
                pipe.hset(self.stage_key, str(n), chunk)
            pipe.pexpire(self.stage_key, STAGING_TTL_MS)
            return list(pipe.execute())

        self._patient(send)
        self.staged += len(self.pending)
        self.pending.clear()
        self.pending_rows = self.pending_bytes = 0
        crash_point("mid_write", self.epoch)

    def _commit(self, new_shards: Sequence[int]) -> None:
        """The atomic step: one apply script for ``new_shards`` (called once, after the writes).

        Safe to call again after a lost reply: the script finds this attempt's own markers and
        answers status 2 with the counts it recorded, never applying twice. Another attempt's
        markers (status 0) or a head past the epoch (-1) make it a no-op; the shards are then
        reported skipped. With no new shards it only drops what this attempt staged.

        Without shard markers (the Spark data source path: tasks are not shard-aligned) the
        script applies the records with no marker; a second apply of a hash or string record
        writes the same value under the same key, a no-op in effect.
        """
        if not new_shards and self.shard_markers:
            self._drop_staging()
            return
        script = self.r.register_script(lua.APPLY)
        keys, args = self._apply_keys(), self._apply_args(new_shards)
        try:
            status, written, failed, stale, deleted, *unchanged = self._patient(
                lambda: script(keys=keys, args=args)
            )
        except redis.ResponseError as exc:
            raise script_error(exc, "the sink") from None
        self.pending.clear()
        self.status = int(status)
        self.result.written += int(written)
        self.result.dead_letters += int(failed)
        self.result.stale += int(stale)
        self.result.deleted += int(deleted)
        self.result.duplicates += sum(int(n) for n in unchanged)  # held by their keys already
        if int(status) <= 0:  # another attempt wrote these shards, and their dead letters
            self.result.dead_letters -= self.letters
            self.result.skipped_shards = sorted(set(self.result.skipped_shards) | set(new_shards))

    def _drop_staging(self) -> None:
        if self.staged:
            self._patient(lambda: self.r.delete(self.stage_key))
            self._patient(lambda: self.r.srem(f"{self.t.prefix}:stages", self.stage_key))

    def _apply_keys(self) -> list[str]:
        """The apply script's KEYS, in the order ``scripts/apply.lua`` reads them."""
        p = self.t.prefix
        return [
            f"{p}:head",
            f"{p}:done:{self.epoch}",
            f"{p}:done-epochs",
            self.stage_key,
            f"{p}:dead-letters",
            f"{p}:streams",
            f"{p}:stages",
        ]

    def _apply_args(self, new_shards: Sequence[int]) -> list[Any]:
        """The apply script's ARGV: epoch, token, staged count, config, shards, inline chunks."""
        config = {
            "mode": self.t.write,
            "ttl": self.t.ttl_ms or 0,
            "fields": list(self.t.fields),
            "idf": self.t.id_field,
            "ef": self.t.epoch_field,
            "query": self.t.query_name,
            "sink": self.t.sink_name,
            "upsert": self.t.upsert is not None,
            "tomb": self.t.tombstone_prefix,
            "ekey": self.t.epoch_prefix,
            "unaligned": not self.shard_markers,
            "guarded": list(self.t.guarded),
        }
        return [
            self.epoch,
            self.token,
            self.staged,
            json.dumps(config),
            json.dumps([str(s) for s in new_shards]),
            *self.pending,
        ]

    def _close(self) -> None:
        if self.r is not None:
            self.r.close()
            self.r = None


class RedisShardWriter(ShardWriter[RedisTarget]):
    """The ``mapInArrow`` function of one epoch. Spark pickles it to every task."""

    task_class = RedisShardTask


def encode_records(
    rows: pa.RecordBatch,
    template: KeyTemplate,
    write: str,
    fields: Sequence[str],
    id_field: str,
    epochs: Sequence[str] | None = None,
    deletes: Sequence[bool | None] | None = None,
) -> bytes:
    """A chunk of records for ``records.lua`` (``eo_records``): their keys (``template``
    rendered), IDs, and bodies (the :data:`VALUE_COLUMN` in string mode, else the ``fields``'
    values, strings or None). ``rows`` holds those columns as strings. With ``epochs``, each
    record's own epoch (else the script's); with ``deletes`` (upserts), whether each record is
    a tombstone (the chunk is then applied with the epoch guard)."""
    keys = template.render(rows)
    ids = rows.column(id_field).to_pylist()
    if write == "string":
        body: Any = rows.column(VALUE_COLUMN).to_pylist()
    else:
        body = [rows.column(f).to_pylist() for f in fields]
    chunk: list[Any] = ["r", keys, ids, body]
    if epochs is not None or deletes is not None:
        chunk.append(None if epochs is None else list(epochs))
    if deletes is not None:
        chunk.append(list(deletes))
    return _dumps(chunk)


def _dumps(value: Any) -> bytes:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode()
