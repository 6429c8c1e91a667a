"""The executor side: one task's shard of an epoch, bulked into the index, then marked.

The task reads which shards of the epoch are committed (a realtime ``mget`` of the shard-commit
documents), bulks its records (and dead letters) until every item is acknowledged, and only
then writes its shard-commit documents into the control index.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from exactlyonce.connectors.base import DeadLetter, ShardTask, ShardWriter
from exactlyonce.connectors.base.columns import DELETE_COLUMN
from exactlyonce.connectors.search.bulk import Action, BulkSender, Refused, header_of
from exactlyonce.connectors.search.config import OpType
from exactlyonce.connectors.search.connection import SearchConnection, call
from exactlyonce.connectors.search.engine import Client
from exactlyonce.connectors.search.schema import ID_COLUMN
from exactlyonce.dedup.shard import DedupPlan
from exactlyonce.errors import SinkUnavailableError
from exactlyonce.faults import crash_point
from exactlyonce.retry import RetryPolicy


def _hex_id(*parts: object) -> str:
    return hashlib.md5("|".join(str(p) for p in parts).encode()).hexdigest()


@dataclass(frozen=True)
class SearchTarget:
    """Everything a task needs to write; picklable, holds no connection."""

    conn: SearchConnection
    index: str
    control_index: str
    dead_letter_index: str
    columns: tuple[str, ...]
    query_name: str
    sink_name: str
    op_type: OpType
    num_shards: int
    retry: RetryPolicy
    bulk_max_actions: int
    bulk_max_bytes: int
    dedup: DedupPlan | None = None
    upsert: bool = False  # index (or delete) with the epoch as external version

    def commit_id(self, epoch: int, shard: int) -> str:
        return f"{self.query_name}|{self.sink_name}|{epoch}|{shard}"


def _has_map(kind: pa.DataType) -> bool:
    """Whether a map type occurs anywhere in ``kind`` (lists, structs, maps, dictionaries)."""
    if pa.types.is_map(kind):
        return True
    if pa.types.is_dictionary(kind):
        return _has_map(kind.value_type)
    return any(_has_map(kind.field(i).type) for i in range(kind.num_fields))


class SearchShardTask(ShardTask):
    """One task's shard: bulk its records, then write the shard-commit documents."""

    def __init__(self, target: SearchTarget, epoch: int) -> None:
        super().__init__(epoch, ID_COLUMN, target.columns, target.dedup, upsert=target.upsert)
        self.t = target
        self.es: Client | None = None
        self.acked = False
        self.null_letters: Counter[str] = Counter()

    @property
    def client(self) -> Client:
        if self.es is None:
            self.es = self.t.conn.client()
        return self.es

    def _bulk(self, actions: Sequence[Action], what: str, count: bool = True) -> Refused:
        """Send ``actions`` until each is acknowledged (see :class:`BulkSender`); with
        ``count``, tally them in the result and pass the ``mid_bulk`` crash point."""
        sender = BulkSender(
            self.client,
            self.t.conn,
            self.t.retry,
            self.t.bulk_max_actions,
            self.t.bulk_max_bytes,
            self.epoch,
        )
        if not count:
            return sender.send(actions, what)
        return sender.send(actions, what, self.result, self._answered)

    def _answered(self) -> None:
        if not self.acked:
            self.acked = True
            crash_point("mid_bulk", self.epoch)

    def _open(self) -> set[int]:
        """The shards of this epoch already committed (their commit documents exist)."""
        ids = [self.t.commit_id(self.epoch, s) for s in range(self.t.num_shards)]
        resp = call(
            self.t.conn,
            self.client,
            self.t.retry,
            "reading shard commits",
            lambda c: c.mget_found(self.t.control_index, ids),
        )
        committed = set()
        for shard, doc in enumerate(resp):
            if doc.get("found"):
                committed.add(shard)
            elif "error" in doc and doc["error"].get("type") != "index_not_found_exception":
                raise SinkUnavailableError(f"cannot read shard commits: {doc['error']}")
        return committed

    def _write_rows(self, rows: pa.RecordBatch) -> None:
        header: dict[str, Any] = {"_index": self.t.index}
        if self.t.upsert:  # the epoch guard: the engine's own external versions
            header.update(version=self.epoch, version_type="external_gte")
        op = self.t.op_type
        actions: list[Action] = []
        # maps_as_pydicts makes pyarrow convert every value the slow way (about 7x slower per
        # row here): ask for it only when a column holds a map, where it changes the result.
        maps = "strict" if any(_has_map(f.type) for f in rows.schema) else None
        for doc in rows.to_pylist(maps_as_pydicts=maps):
            if not self.t.upsert:
                actions.append(({op: {**header, "_id": doc.pop(ID_COLUMN)}}, doc))
            elif doc.pop(DELETE_COLUMN):
                actions.append(({"delete": {**header, "_id": doc.pop(ID_COLUMN)}}, None))
            else:
                actions.append(({"index": {**header, "_id": doc.pop(ID_COLUMN)}}, doc))
        refused = self._bulk(actions, "records")
        letters = [
            DeadLetter(
                self.epoch,
                None,
                next(iter(header_of(actions[pos]).values()))["_id"],
                error,
                json.dumps(actions[pos][1], default=str, ensure_ascii=False),
            )
            for pos, error in refused
        ]
        if letters:
            self._write_dead_letters(letters)
            self.result.dead_letters += len(letters)

    def _write_dead_letters(self, letters: Sequence[DeadLetter]) -> None:
        actions: list[Action] = []
        for d in letters:
            if d.key is not None:  # a path without shard markers: keyed per Spark partition
                key = d.key
            elif d.record_id is None:  # identical null-key records stay distinct letters
                self.null_letters[d.payload or ""] += 1
                key = f"null:{d.payload}#{self.null_letters[d.payload or '']}"
            else:
                key = d.record_id
            doc_id = _hex_id(self.t.query_name, self.t.sink_name, d.epoch, key)
            doc = {
                "query_name": self.t.query_name,
                "sink": self.t.sink_name,
                "index": self.t.index,
                "epoch": d.epoch,
                "shard": d.shard,
                "record_id": d.record_id,
                "error": d.error,
                "payload": d.payload,
            }
            actions.append(({"create": {"_index": self.t.dead_letter_index, "_id": doc_id}}, doc))
        refused = self._bulk(actions, "dead letters", count=False)
        oversize = [actions[pos] for pos, error in refused if error.startswith("413")]
        if oversize and len(oversize) == len(refused):  # the record was too large: so is its
            refused = self._bulk([_cut(a) for a in oversize], "dead letters", count=False)
        if refused:
            raise SinkUnavailableError(
                f"the dead-letter index {self.t.dead_letter_index!r} refused {len(refused)} "
                f"letters, e.g. {refused[0][1]}; the task fails rather than drop records"
            )

    def _commit(self, new_shards: Sequence[int]) -> None:
        """Every item is acknowledged (or dead-lettered) by now: mark the shards committed.

        Idempotent: a commit document is created once (a re-sent one is a 409). Written only
        after every record, so a crash before it leaves the shard to be re-sent whole.
        """
        actions: list[Action] = []
        for shard in new_shards:
            doc = {
                "kind": "shard_commit",
                "query_name": self.t.query_name,
                "sink": self.t.sink_name,
                "epoch": self.epoch,
                "shard": shard,
                "writer": self.result.writer,
            }
            header = {"_index": self.t.control_index, "_id": self.t.commit_id(self.epoch, shard)}
            actions.append(({"create": header}, doc))
        if actions and self._bulk(actions, "shard commits", count=False):
            raise SinkUnavailableError(f"cannot write the shard commits of epoch {self.epoch}")

    def _close(self) -> None:
        if self.es is not None:
            self.es.close()
            self.es = None


class SearchShardWriter(ShardWriter[SearchTarget]):
    """The ``mapInArrow`` function of one epoch. Spark pickles it to every task."""

    task_class = SearchShardTask


CUT_PAYLOAD_CHARS = 4096


def _cut(action: Action) -> Action:
    """A dead letter whose record was too large for the server (HTTP 413), with its payload cut
    to its first :data:`CUT_PAYLOAD_CHARS` characters and the original length named."""
    header, doc = action
    assert isinstance(doc, dict)
    payload = str(doc.get("payload") or "")
    cut = f"{payload[:CUT_PAYLOAD_CHARS]}... [cut: {len(payload)} characters in all]"
    return header, {**doc, "payload": cut}
