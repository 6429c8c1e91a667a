"""The Elasticsearch and OpenSearch sinks in Spark Real-time Mode (the writer:
:mod:`exactlyonce.connectors.base.realtime`): records idempotent by ``_id``, then the source
frontiers, each moved only from the version this writer read.

A search engine has no transaction over many documents, so a chunk's commit is two steps
whose order makes a crash between them harmless:

1. the frontier of each of the chunk's source partitions is read again (a realtime GET of the
   frontier document ``rtm|<query>|<sink>|<topic>|<partition>`` in the control index): one
   that moved since this writer read it means another attempt wrote past it; nothing is
   written (:class:`~exactlyonce.errors.FrontierMovedError`);
2. the rows are bulked with their record ID as ``_id`` (``op_type`` ``create``: a re-sent
   document is a 409, never a second write; ``index``: the same document written again);
   refused rows go to the dead-letter index with their reason;
3. each frontier document moves on only from the ``_seq_no``/``_primary_term`` this writer
   read (``create`` for a first one): a concurrent writer's move makes it a 409, raised as
   FrontierMovedError. A crash after step 2 leaves documents whose frontier did not move:
   the retried task writes them again under the same ``_id``s.
"""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date, datetime
from decimal import Decimal
from typing import Any

from exactlyonce.connectors.base.frontier import Chunk, SourceKey
from exactlyonce.connectors.base.realtime import FrontierStore, FrontierTarget, TaskInfo
from exactlyonce.connectors.search.bulk import Action, BulkSender, header_of
from exactlyonce.connectors.search.config import OpType
from exactlyonce.connectors.search.connection import SearchConnection, call
from exactlyonce.connectors.search.engine import Client, Conflict, NotFound
from exactlyonce.connectors.search.schema import ID_COLUMN
from exactlyonce.errors import ConfigError, FrontierMovedError, SinkUnavailableError
from exactlyonce.retry import RetryPolicy

RTM = "rtm"


def frontier_id(query_name: str, sink_name: str, topic: str, partition: int) -> str:
    """The control-index ``_id`` of one source partition's frontier."""
    return f"{RTM}|{query_name}|{sink_name}|{topic}|{partition}"


def _json(value: Any) -> Any:
    """A row's value as the engine takes it in a document (binary as base64)."""
    if isinstance(value, (bytes, bytearray)):
        return base64.b64encode(bytes(value)).decode("ascii")
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, date):
        return value.isoformat()
    if isinstance(value, Decimal):
        return str(value)
    if hasattr(value, "asDict"):
        return {k: _json(v) for k, v in value.asDict().items()}
    if isinstance(value, dict):
        return {str(k): _json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json(v) for v in value]
    return value


@dataclass(frozen=True)
class SearchFrontierTarget(FrontierTarget):
    """Everything a task needs; picklable, holds no connection."""

    conn: SearchConnection
    index: str
    control_index: str
    dead_letter_index: str
    query_name: str
    sink_name: str
    epoch_field: str
    op_type: OpType
    retry: RetryPolicy
    bulk_max_actions: int
    bulk_max_bytes: int

    def open_store(self, task: TaskInfo) -> SearchFrontierStore:
        return SearchFrontierStore(self, task)


@dataclass
class _Read:
    next_offset: int
    seq_no: int
    primary_term: int
    claim: dict[str, Any]


class SearchFrontierStore(FrontierStore):
    """One task's client and its commits."""

    def __init__(self, target: SearchFrontierTarget, task: TaskInfo) -> None:
        self.t = target
        self.task = task
        self.client: Client | None = target.conn.client()
        self.names: tuple[str, ...] = ()
        self.read_at: dict[SourceKey, _Read | None] = {}

    @property
    def _client(self) -> Client:
        assert self.client is not None, "store closed"
        return self.client

    def prepare(self, columns: Sequence[str]) -> None:
        for reserved, option in ((self.t.epoch_field, "epoch_field"), (ID_COLUMN, "id_columns")):
            if reserved in columns:
                raise ConfigError(
                    option, f"the stream already has a column named {reserved!r}; choose another"
                )
        self.names = tuple(columns)

    def read(self, key: SourceKey) -> int | None:
        found = self._get(key)
        self.read_at[key] = found
        if found is None:
            return None
        if self._claimed_by_another_task(found.claim):
            raise ConfigError(
                "source_columns",
                f"source partition {key[0]}[{key[1]}] is written by two Spark tasks of epoch "
                f"{self.task.epoch} (partitions {found.claim.get('spark_partition')} and "
                f"{self.task.partition_id}): the query splits or shuffles the source's "
                "partitions before the sink",
            )
        return found.next_offset

    def commit(self, chunk: Chunk) -> None:
        for key, expected in chunk.expected.items():
            now = self._get(key)
            if (None if now is None else now.next_offset) != expected:
                self._moved(key, now, expected)
        self._write_rows(chunk.rows)
        for key, next_offset in chunk.next_offsets.items():
            self._move(key, next_offset)

    def close(self) -> None:
        if self.client is not None:
            self.client.close()
            self.client = None

    # -- the steps -----------------------------------------------------------------------

    def _get(self, key: SourceKey) -> _Read | None:
        doc_id = frontier_id(self.t.query_name, self.t.sink_name, *key)
        try:
            doc = call(
                self.t.conn,
                self._client,
                self.t.retry,
                "reading a source frontier",
                lambda c: c.get(self.t.control_index, doc_id),
            )
        except NotFound:
            return None
        if not doc.get("found", True):
            return None
        source = doc["_source"]
        return _Read(
            int(source["next_offset"]), int(doc["_seq_no"]), int(doc["_primary_term"]), source
        )

    def _claimed_by_another_task(self, claim: dict[str, Any]) -> bool:
        same_run = self.task.query_id is not None and claim.get("spark_query_id") == (
            self.task.query_id
        )
        return (
            same_run
            and claim.get("epoch") == self.task.epoch
            and claim.get("spark_partition") != self.task.partition_id
        )

    def _moved(self, key: SourceKey, now: _Read | None, expected: int | None) -> None:
        found = None if now is None else now.next_offset
        by = None if now is None else now.claim.get("writer")
        raise FrontierMovedError(
            f"{self.t.query_name}: the frontier of {key[0]}[{key[1]}] is {found} in "
            f"{self.t.control_index}, not {expected} as this writer ({self.task.writer}) read "
            f"it: writer {by} moved it. Nothing written; the retried task reads it again"
        )

    def _write_rows(self, rows: list[tuple[Any, ...]]) -> None:
        n = len(self.names)
        actions: list[Action] = []
        for row in rows:
            doc = {name: _json(v) for name, v in zip(self.names, row[:n], strict=True)}
            doc[self.t.epoch_field] = row[n + 1]
            header: dict[str, Any] = {self.t.op_type: {"_index": self.t.index, "_id": str(row[n])}}
            actions.append((header, doc))
        refused = self._sender().send(actions, "records")
        if refused:
            self._dead_letters([(actions[pos], error) for pos, error in refused])

    def _dead_letters(self, refused: list[tuple[Action, str]]) -> None:
        t = self.t
        letters: list[Action] = []
        for action, error in refused:
            record_id = next(iter(header_of(action).values()))["_id"]
            doc = action[1]
            key = f"{t.query_name}|{t.sink_name}|{self.task.epoch}|{record_id}"
            letter = {
                "query_name": t.query_name,
                "sink": t.sink_name,
                "index": t.index,
                "epoch": self.task.epoch,
                "shard": None,
                "record_id": record_id,
                "error": error,
                "payload": json.dumps(doc, default=str, ensure_ascii=False),
            }
            doc_id = hashlib.md5(key.encode()).hexdigest()
            letters.append(({"create": {"_index": t.dead_letter_index, "_id": doc_id}}, letter))
        if self._sender().send(letters, "dead letters"):
            raise SinkUnavailableError(
                f"the dead-letter index {t.dead_letter_index!r} refused letters; the task "
                "fails rather than drop records"
            )

    def _sender(self) -> BulkSender:
        t = self.t
        return BulkSender(
            self._client, t.conn, t.retry, t.bulk_max_actions, t.bulk_max_bytes, self.task.epoch
        )

    def _move(self, key: SourceKey, next_offset: int) -> None:
        t, task = self.t, self.task
        doc_id = frontier_id(t.query_name, t.sink_name, *key)
        document = {
            "kind": "rtm_frontier",
            "query_name": t.query_name,
            "sink": t.sink_name,
            "topic": key[0],
            "partition": key[1],
            "next_offset": next_offset,
            "epoch": task.epoch,
            "spark_query_id": task.query_id,
            "spark_partition": task.partition_id,
            "writer": task.writer,
        }
        read = self.read_at.get(key)
        try:
            answer = call(
                t.conn,
                self._client,
                t.retry,
                "moving a source frontier",
                lambda c: (
                    c.create(t.control_index, doc_id, document)
                    if read is None
                    else c.index_if(
                        t.control_index, doc_id, document, read.seq_no, read.primary_term
                    )
                ),
            )
        except Conflict:
            self._moved(key, self._get(key), None if read is None else read.next_offset)
        self.read_at[key] = _Read(
            next_offset, int(answer["_seq_no"]), int(answer["_primary_term"]), document
        )


def read_frontiers(
    conn: SearchConnection,
    client: Client,
    retry: RetryPolicy,
    control_index: str,
    query_name: str,
    sink_name: str,
) -> dict[SourceKey, int]:
    """Every source frontier the sink holds for ``(query_name, sink_name)``, read-only."""
    query = {
        "query": {
            "bool": {
                "filter": [
                    {"term": {"kind": "rtm_frontier"}},
                    {"term": {"query_name": query_name}},
                    {"term": {"sink": sink_name}},
                ]
            }
        }
    }
    client.refresh(control_index)
    hits = call(
        conn,
        client,
        retry,
        "reading the source frontiers",
        lambda c: list(c.scan(control_index, query, 1000, "1m")),
    )
    found: dict[SourceKey, int] = {}
    for hit in hits:
        source = hit["_source"]
        found[(str(source["topic"]), int(source["partition"]))] = int(source["next_offset"])
    return found
