"""The Kafka sink's executor side: one task writes its shard of an epoch in ONE transaction.

:class:`KafkaShardTask` is the :class:`~exactlyonce.connectors.base.ShardTask` for Kafka:
``_open`` fences older attempts (``init_transactions``) and learns from the control topic
whether an earlier attempt committed the shard; ``_write_rows`` produces records (or frames,
:mod:`.frames`) into the open transaction; ``_commit`` commits them with their marker, then
confirms the attempt (:mod:`.transaction` has these steps). Records too large for a message
go to the dead-letter topic in the same transaction.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from confluent_kafka import KafkaError, KafkaException, Producer

from exactlyonce.connectors.base import SHARD_COLUMN, DeadLetter, ShardTask
from exactlyonce.connectors.base.frames import frame_bounds, frame_partition, pack, single_headers
from exactlyonce.connectors.kafka.arrowproduce import native_loop, produce_columns
from exactlyonce.connectors.kafka.clients import init_transactions, produce_waiting
from exactlyonce.connectors.kafka.protocol import (
    DEAD_LETTER_PAYLOAD_LIMIT,
    H_ATTEMPT,
    H_COMPACT,
    H_EPOCH,
    H_ERROR,
    H_QUERY,
    H_RECORD_ID,
    H_SHARD,
    ID_COLUMN,
    KEY_COLUMN,
    VALUE_COLUMN,
    compact_prefix,
)
from exactlyonce.connectors.kafka.target import KafkaTarget
from exactlyonce.connectors.kafka.transaction import TransactionSteps, TxnState
from exactlyonce.faults import armed, crash_point

_TOO_LARGE = (KafkaError.MSG_SIZE_TOO_LARGE,)  # librdkafka refuses it in produce()


class KafkaShardTask(TransactionSteps, ShardTask):
    """One task's Kafka transaction for its shard.

    ``_open`` fences older attempts (``init_transactions``), then reads the control topic up
    to a barrier record of its own to learn whether an earlier attempt committed the shard;
    ``_commit`` commits the data with its marker, then confirms the attempt.
    """

    def __init__(self, target: KafkaTarget, epoch: int) -> None:
        super().__init__(epoch, ID_COLUMN, target.columns, target.dedup)
        self.t = target
        self.attempt = uuid.uuid4().hex[:16]
        self.shard: int | None = None
        self.producer: Producer | None = None
        self.txn_state = TxnState.IDLE
        self.produced = 0
        self.frames = 0  # frames produced by this attempt (where the next one goes)
        self.dead = 0
        self.chunks = 0
        self.headers: list[tuple[str, str | bytes | None]] = []  # frames and dead letters
        self.compact = b""  # a record's one header (wire format 1), before its ID

    def write(self, batch: pa.RecordBatch) -> None:
        if batch.num_rows:
            bounds = pc.min_max(batch.column(SHARD_COLUMN)).as_py()
            low, high = int(bounds["min"]), int(bounds["max"])
            if self.shard is None:
                self.shard = low
            if low != self.shard or high != self.shard:
                raise AssertionError(
                    f"{self.where}: a task holds one shard (one transactional.id); got "
                    f"shards {low}..{high}"
                )
        super().write(batch)

    # -- ShardTask ---------------------------------------------------------------------

    def _open(self) -> set[int]:
        assert self.shard is not None
        self.headers = [
            (H_QUERY, self.t.query_name.encode()),
            (H_EPOCH, str(self.epoch).encode()),
            (H_SHARD, str(self.shard).encode()),
            (H_ATTEMPT, self.attempt.encode()),
        ]
        self.compact = compact_prefix(self.t.query_name, self.epoch, self.shard, self.attempt)
        self.producer = Producer(self._producer_config())
        init_transactions(self.producer, self.t.control_topic, self.t.timeout_s)
        if self._committed_earlier():
            return {self.shard}
        self._begin()
        return set()

    def _producer_config(self) -> dict[str, Any]:
        assert self.shard is not None
        return self.t.producer_config(self.shard)

    def _write_rows(self, rows: pa.RecordBatch) -> None:
        assert self.producer is not None
        if self.t.frame_records > 1:
            too_large = self._write_frames(*_ids_and_values(rows))
        else:
            too_large = self._write_records(rows)
        self.producer.poll(0)
        written = rows.num_rows - len(too_large)
        self.produced += written
        self.result.written += written
        if too_large:
            self._dead_letter_too_large(too_large, rows)
        self.chunks += 1
        if self.chunks == 1 and armed("mid_produce"):
            self.producer.flush()  # so the first chunk really is on the broker
            crash_point("mid_produce", self.epoch)

    def _write_records(self, rows: pa.RecordBatch) -> list[int]:
        """One message per record with one header, ``eo`` (wire format 1: the attempt's
        :func:`compact_prefix`, then the record's ID). Returns the rows too large for a
        message. The sink's hot loop: in native code from the Arrow columns where it can
        (:mod:`.arrowproduce`), else one Python ``produce`` per record."""
        native = native_loop()
        if native is None:
            return self._write_records_from_python(rows)
        assert self.producer is not None
        keys = rows.column(KEY_COLUMN) if self.t.has_key else None

        def one_from_python(i: int) -> bool:
            value, key, rid = _row(rows, i, self.t.has_key)
            return self._produce(value, key, [(H_COMPACT, self.compact + rid)])

        return produce_columns(
            native,
            self.producer,
            self.t.topic,
            rows.column(VALUE_COLUMN),
            keys,
            (H_COMPACT, self.compact),
            rows.column(ID_COLUMN),
            one_from_python,
        )

    def _write_records_from_python(self, rows: pa.RecordBatch) -> list[int]:
        """:meth:`_write_records` one ``produce`` per record: nothing else in the common
        case (a full local queue or a refused size take the slow path)."""
        assert self.producer is not None
        ids, values = _ids_and_values(rows)
        keys = rows.column(KEY_COLUMN).to_pylist() if self.t.has_key else [None] * len(ids)
        produce, topic, prefix = self.producer.produce, self.t.topic, self.compact
        too_large: list[int] = []
        for i, (value, key, rid) in enumerate(zip(values, keys, ids, strict=True)):
            headers = [(H_COMPACT, prefix + rid)]
            try:
                produce(topic, value, key, headers=headers)
            except (BufferError, KafkaException):
                if not self._produce(value, key, headers):
                    too_large.append(i)
        return too_large

    def _write_frames(self, ids: list[Any], values: list[Any]) -> list[int]:
        """Frames (see :func:`frame_bounds`): the values one per line, the IDs (32 bytes
        each, in the same order) in ``eo-record-ids``. A record too large for a frame of its
        own is returned."""
        too_large: list[int] = []
        for start, end in frame_bounds(values, self.t.frame_records, self.t.frame_bytes):
            frame, ids_header = pack(values[start:end], ids[start:end])
            headers = [*self.headers, ids_header]
            if self._produce(frame, None, headers, self._next_frame_partition()):
                continue
            if end - start == 1:
                too_large.append(start)
            else:  # cannot happen within the budget (half of message.max.bytes); if it does:
                singles = self._write_frames_of_one(ids[start:end], values[start:end])
                too_large += [start + j for j in singles]
        return too_large

    def _write_frames_of_one(self, ids: list[Any], values: list[Any]) -> list[int]:
        return [
            i
            for i, (value, rid) in enumerate(zip(values, ids, strict=True))
            if not self._produce(value, None, single_headers(self.headers, rid))
        ]

    def _next_frame_partition(self) -> int:
        """See :func:`.frames.frame_partition`."""
        assert self.shard is not None
        partition = frame_partition(self.shard, self.frames, self.t.topic_partitions)
        if partition >= 0:
            self.frames += 1
        return partition

    def _produce(
        self, value: bytes | None, key: bytes | None, headers: list[Any], partition: int = -1
    ) -> bool:
        """Produce one message (``partition`` -1: the partitioner's choice); False when it
        is too large to be one."""
        assert self.producer is not None
        try:
            produce_waiting(
                self.producer, self.t.topic, value, key, partition=partition, headers=headers
            )
        except KafkaException as exc:
            if exc.args[0].code() not in _TOO_LARGE:
                raise
            return False
        return True

    def _dead_letter_too_large(self, rows_at: list[int], rows: pa.RecordBatch) -> None:
        letters = []
        limit = self.t.max_message_bytes
        room = min(DEAD_LETTER_PAYLOAD_LIMIT, max(256, limit // 2))
        for i in rows_at:
            payload, _, rid = _row(rows, i, has_key=False)
            payload = payload or b""
            letters.append(
                DeadLetter(
                    self.epoch,
                    self.shard,
                    rid.decode(),
                    f"record too large: {len(payload)} bytes of value, the limit is "
                    f"{limit} (message.max.bytes / the topic's max.message.bytes); "
                    "payload truncated",
                    payload[:room].decode("utf-8", errors="replace"),
                )
            )
        self._write_dead_letters(letters)
        self.result.dead_letters += len(letters)

    def _write_dead_letters(self, letters: Sequence[DeadLetter]) -> None:
        assert self.producer is not None
        for d in letters:
            headers = [*self.headers, (H_ERROR, d.error.encode())]
            if d.record_id:
                headers.append((H_RECORD_ID, d.record_id.encode()))
            payload = (d.payload or "").encode()
            produce_waiting(self.producer, self.t.dead_letter_topic, payload, None, headers=headers)
        self.dead += len(letters)

    def _commit(self, new_shards: Sequence[int]) -> None:
        if not self.in_transaction:
            return  # the shard was committed by an earlier attempt
        self._commit_shard(self._commit_info())

    def _commit_info(self) -> dict[str, Any]:
        """The commit marker's (and the confirmation's) JSON value."""
        return {
            "attempt": self.attempt,
            "count": self.produced,
            "dead_letters": self.dead,
            "topic": self.t.topic,
            "writer": self.result.writer,
        }

    def _close(self) -> None:
        self._abort_open()


def _ids_and_values(rows: pa.RecordBatch) -> tuple[list[Any], list[Any]]:
    """The rows' IDs (as bytes) and values as Python lists."""
    ids = pc.cast(rows.column(ID_COLUMN), pa.binary()).to_pylist()
    return ids, rows.column(VALUE_COLUMN).to_pylist()


def _row(rows: pa.RecordBatch, i: int, has_key: bool) -> tuple[bytes | None, bytes | None, bytes]:
    """Row ``i``'s value, key (None without ``has_key``) and ID (bytes)."""
    value = rows.column(VALUE_COLUMN)[i].as_py()
    key = rows.column(KEY_COLUMN)[i].as_py() if has_key else None
    rid = rows.column(ID_COLUMN)[i].as_py()
    return value, key, rid.encode() if isinstance(rid, str) else bytes(rid)
