"""The Redis sink in Spark Real-time Mode: each chunk of rows and its source frontiers in ONE
Lua script (the writer: :mod:`exactlyonce.connectors.base.realtime`).

``<prefix>:rtm:frontiers`` (a hash) holds, per source partition (field ``topic|partition``),
the next source offset to write; ``<prefix>:rtm:claims`` the writer that last moved it (Spark
query id, epoch, Spark partition, writer). One commit is one run of ``scripts/frontier.lua``:

1. each frontier of the chunk must still be what this writer read or last committed, else
   another writer (an earlier attempt of the task) moved it: nothing is written, and the task
   fails with :class:`~exactlyonce.errors.FrontierMovedError` (Spark retries it; the retry
   reads again). A frontier claimed in the same epoch of the same Spark query by another Spark
   partition means one source partition reaches two tasks: refused (ConfigError);
2. the new frontiers and claims, then the rows, applied as the micro-batch path applies them
   (``records.lua``: hash, string or stream writes, TTL, dead letters for a record Redis
   refuses or whose key lies in the sink's control namespace).

A Lua script runs alone on the server, so the check and the writes are one atomic step; a lost
reply is raised as it is (the retried task reads the frontier: the outcome is never guessed).
Rows become text as on the data source path (:func:`.projection.project_arrow`): the same
bytes as micro-batch for strings, integers and booleans; a null key-template column makes the
row a dead letter with its reason.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date, datetime
from typing import Any

import pyarrow as pa
import redis

from exactlyonce.connectors.base import ERROR_COLUMN, PAYLOAD_COLUMN
from exactlyonce.connectors.base.columns import SHARD_COLUMN
from exactlyonce.connectors.base.frontier import Chunk, SourceKey
from exactlyonce.connectors.base.realtime import FrontierStore, FrontierTarget, TaskInfo
from exactlyonce.connectors.redis import lua
from exactlyonce.connectors.redis.connection import BUSY_POLICY, connect, patient, script_error
from exactlyonce.connectors.redis.projection import project_arrow
from exactlyonce.connectors.redis.task import VALUE_COLUMN, encode_records
from exactlyonce.connectors.redis.template import KeyTemplate
from exactlyonce.errors import ConfigError, FrontierMovedError
from exactlyonce.retry import RetryPolicy
from exactlyonce.secrets import Secret

_PLAIN = (str, int, bool)


def frontiers_key(prefix: str) -> str:
    return f"{prefix}:rtm:frontiers"


def claims_key(prefix: str) -> str:
    return f"{prefix}:rtm:claims"


def _field(key: SourceKey) -> str:
    return f"{key[0]}|{key[1]}"


def _text(value: Any) -> Any:
    """A value Arrow can hold as a string column's cell, as Spark's cast would write it for
    the common types (None, strings, integers and booleans pass as they are)."""
    if value is None or isinstance(value, _PLAIN):
        return value
    if isinstance(value, datetime):
        return value.isoformat(sep=" ")
    if isinstance(value, date):
        return value.isoformat()
    if isinstance(value, (bytes, bytearray)):
        return base64.b64encode(bytes(value)).decode("ascii")
    if hasattr(value, "asDict") or isinstance(value, (dict, list, tuple)):
        return json.dumps(_plain(value), default=str, ensure_ascii=False, separators=(",", ":"))
    return str(value)


def _plain(value: Any) -> Any:
    if hasattr(value, "asDict"):
        return {k: _plain(v) for k, v in value.asDict().items()}
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


@dataclass(frozen=True)
class RedisFrontierTarget(FrontierTarget):
    """Everything a task needs; picklable, holds no connection."""

    url: Secret
    write: str
    template: KeyTemplate
    id_field: str
    epoch_field: str
    ttl_ms: int | None
    prefix: str
    query_name: str
    sink_name: str
    socket_timeout: float
    connect_timeout: float
    retries: int
    guarded: tuple[str, ...] = ()
    busy: RetryPolicy = BUSY_POLICY

    def open_store(self, task: TaskInfo) -> RedisFrontierStore:
        return RedisFrontierStore(self, task)


class RedisFrontierStore(FrontierStore):
    """One task's connection and its commits."""

    def __init__(self, target: RedisFrontierTarget, task: TaskInfo) -> None:
        self.t = target
        self.task = task
        self.user: tuple[str, ...] = ()
        self.r: Any = connect(
            target.url,
            retries=target.retries,
            socket_timeout=target.socket_timeout,
            connect_timeout=target.connect_timeout,
        )

    def prepare(self, columns: Sequence[str]) -> None:
        names = list(columns)
        reserved = [(self.t.id_field, "id_field"), (self.t.epoch_field, "epoch_field")]
        if self.t.write == "string":
            reserved.append((VALUE_COLUMN, "write"))
        for name, option in reserved:
            if name in names:
                raise ConfigError(
                    option, f"the stream already has a column named {name!r}; choose another"
                )
        missing = [f for f in self.t.template.fields if f not in names]
        if missing:
            raise ConfigError(
                "key_template",
                f"{self.t.template.text!r} names column(s) {missing} that are not in the "
                f"stream's columns {names}",
            )
        self.user = tuple(names)

    def read(self, key: SourceKey) -> int | None:
        found = patient(lambda: self.r.hget(frontiers_key(self.t.prefix), _field(key)), self.t.busy)
        return None if found is None else int(found)

    def commit(self, chunk: Chunk) -> None:
        t, task = self.t, self.task
        claim = f"{task.query_id or ''}|{task.epoch}|{task.partition_id}|{task.writer}"
        args = [
            task.epoch,
            json.dumps(self._config()),
            json.dumps({_field(k): v for k, v in chunk.expected.items()}),
            json.dumps({_field(k): v for k, v in chunk.next_offsets.items()}),
            claim,
            task.query_id or "",
            task.partition_id,
            *self._chunks(chunk.rows),
        ]
        keys = [
            frontiers_key(t.prefix),
            claims_key(t.prefix),
            f"{t.prefix}:dead-letters",
            f"{t.prefix}:streams",
        ]
        script = self.r.register_script(lua.FRONTIER)
        try:
            patient(lambda: script(keys=keys, args=args), t.busy)
        except redis.ResponseError as exc:
            text = str(exc)
            if text.startswith("EO_FRONTIER_MOVED"):
                raise FrontierMovedError(
                    f"{t.query_name}: {text.removeprefix('EO_FRONTIER_MOVED ')}. Nothing "
                    "written; the retried task reads it again"
                ) from None
            if text.startswith("EO_SHUFFLED"):
                raise ConfigError(
                    "source_columns",
                    f"{text.removeprefix('EO_SHUFFLED ')}: the query splits or shuffles the "
                    "source's partitions before the sink",
                ) from None
            raise script_error(exc, "the sink") from None

    def close(self) -> None:
        if self.r is not None:
            self.r.close()
            self.r = None

    # -- encoding ------------------------------------------------------------------------

    def _config(self) -> dict[str, Any]:
        t = self.t
        return {
            "mode": t.write,
            "ttl": t.ttl_ms or 0,
            "fields": list(self._fields()),
            "idf": t.id_field,
            "ef": t.epoch_field,
            "query": t.query_name,
            "sink": t.sink_name,
            "upsert": False,
            "tomb": "",
            "ekey": "",
            "unaligned": False,
            "guarded": list(t.guarded),
        }

    def _fields(self) -> tuple[str, ...]:
        return () if self.t.write == "string" else self.user

    def _chunks(self, rows: list[tuple[Any, ...]]) -> list[bytes]:
        """The rows as ``records.lua`` chunks: the good ones, then the dead letters."""
        t, n = self.t, len(self.user)
        table = {name: [_text(r[i]) for r in rows] for i, name in enumerate(self.user)}
        table[t.id_field] = [str(r[n]) for r in rows]
        table[t.epoch_field] = [str(r[n + 1]) for r in rows]
        table[ERROR_COLUMN] = [None] * len(rows)
        table[PAYLOAD_COLUMN] = [None] * len(rows)
        table[SHARD_COLUMN] = [0] * len(rows)
        batch = project_arrow(
            pa.RecordBatch.from_pydict(table),
            self.user,
            t.template,
            t.write,
            t.id_field,
            t.epoch_field,
        )
        errors = batch.column(ERROR_COLUMN).to_pylist()
        good = [i for i, e in enumerate(errors) if e is None]
        chunks: list[bytes] = []
        if good:
            kept = batch.take(pa.array(good)) if len(good) < len(rows) else batch
            chunks.append(encode_records(kept, t.template, t.write, self._fields(), t.id_field))
        bad = [i for i, e in enumerate(errors) if e is not None]
        if bad:
            payloads = batch.column(PAYLOAD_COLUMN).to_pylist()
            ids = batch.column(t.id_field).to_pylist()
            letters = [[self.task.epoch, None, ids[i], errors[i], payloads[i]] for i in bad]
            chunks.append(json.dumps(["d", letters], separators=(",", ":")).encode())
        return chunks


def read_frontiers(client: Any, prefix: str) -> dict[SourceKey, int]:
    """Every source frontier the sink holds under ``prefix`` (read-only)."""
    found: dict[SourceKey, int] = {}
    for field, offset in client.hgetall(frontiers_key(prefix)).items():
        text = field.decode() if isinstance(field, bytes) else str(field)
        topic, _, partition = text.rpartition("|")
        found[(topic, int(partition))] = int(offset)
    return found
