"""The drainer's target for the Elasticsearch family: records idempotent by ``_id``, THEN the
offsets.

Elasticsearch and OpenSearch have no atomic step across documents, so (as the sink's tasks do)
idempotence carries the write: every record is sent as a bulk ``create`` with ``_id`` = its
record ID and ``_source`` = its row with the epoch field, and a second copy of an ``_id`` is a
409, a no-op counted as a duplicate. Only failed items are re-sent (the sink's
:class:`~exactlyonce.connectors.search.bulk.BulkSender` and retry policy: 429/5xx with capped
backoff, a lost reply re-sends what it left unknown); items Elasticsearch refuses for their
content (400: a value the mapping cannot take, a value that is no JSON object) go to the drain
dead-letter topic with the reason. Only when every record of the share is acknowledged or
dead-lettered are the offsets written.

Where the offsets live: one document per (query, sink, topic) in the sink's control index,
``_id`` ``<query>|<sink>|drain|<topic>``, ``offsets`` {partition: next offset} (mapped
``enabled: false``: kept, never indexed). It is read with a realtime GET and written with
optimistic concurrency (``if_seq_no``/``if_primary_term``; ``create`` when there is none yet)
as the compare-and-set: on a conflict the document is read again, and if this writer's
partitions are still what it holds (another writer of the same drainer moved others) the write
is merged and tried again; otherwise (another drainer, or this one's write whose reply was
lost) it is an :class:`~exactlyonce.errors.OffsetsMovedError`.

A crash after some records and before the offsets re-sends the share on restart: those records
are 409s, written once. The ``drain_mid_write`` crash point is passed when the share's first
bulk item is answered.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from exactlyonce.connectors.base.drain import (
    Counts,
    Letter,
    Ownership,
    Share,
    TargetClassDefaults,
    owned,
)
from exactlyonce.connectors.base.frames import value_problem
from exactlyonce.connectors.base.guarantee import Guarantee
from exactlyonce.connectors.search.bulk import ITEM_ANSWERS, Action, BulkSender, RawHeader
from exactlyonce.connectors.search.connection import call
from exactlyonce.connectors.search.engine import BadRequest, Client, Conflict, NotFound
from exactlyonce.connectors.search.sink import SearchSink
from exactlyonce.errors import ConfigError, OffsetsMovedError
from exactlyonce.faults import crash_point

T = TypeVar("T")
Record = tuple[int, int, bytes, bytes]  # (message, place in its frame, record ID, value)

KIND = "drain_offsets"
# Added to the control index's (strict) mapping by ensure(): the offsets document's fields.
DRAIN_FIELDS: dict[str, Any] = {
    "topic": {"type": "keyword"},
    "offsets": {"type": "object", "enabled": False},
}
MAX_ID_BYTES = 512


def offsets_doc_id(query_name: str, sink_name: str, topic: str) -> str:
    """``<query>|<sink>|drain|<topic>``; its MD5 when longer than an ``_id`` may be."""
    doc_id = f"{query_name}|{sink_name}|drain|{topic}"
    if len(doc_id.encode()) <= MAX_ID_BYTES:
        return doc_id
    return "drain:" + hashlib.md5(doc_id.encode()).hexdigest()


def with_epoch(value: bytes, epoch_key: bytes, epoch: int) -> bytes | None:
    """The record's JSON object with the epoch field added last, as one line (a bulk body has
    one line per document). A value with line breaks, or not starting with ``{``, is
    re-encoded; None when it is then no JSON object. Other flaws are Elasticsearch's to find.
    """
    if value[:1] != b"{" or b"\n" in value or b"\r" in value:
        try:
            doc = json.loads(value)
        except ValueError:
            return None
        if not isinstance(doc, dict):
            return None
        value = json.dumps(doc, ensure_ascii=False, separators=(",", ":")).encode()
    head = value.rstrip()[:-1].rstrip()  # the closing brace off
    sep = b"" if head.endswith(b"{") else b","
    return b"%s%s%s:%d}" % (head, sep, epoch_key, epoch)


@dataclass
class _Tally:
    written: int = 0
    duplicates: int = 0
    stale: int = 0  # upserts only: never here (upsert sinks are not drained)
    deleted: int = 0


class SearchDrainTarget(TargetClassDefaults):
    """Writes drained records into a :class:`~exactlyonce.connectors.search.sink.SearchSink`'s
    index (``op_type`` ``create``): a :class:`~exactlyonce.connectors.base.drain.DrainTarget`.

    Guarantee: IDEMPOTENT, THEN OFFSETS. Each record is created under its record ID (a re-sent
    one is a 409, never a second version); the offsets document is written after every record
    of the share was acknowledged, compared-and-set with ``if_seq_no``/``if_primary_term``.
    See :mod:`exactlyonce.connectors.search.drain`.
    """

    @staticmethod
    def check(sink: SearchSink) -> None:
        if sink.op_type != "create":
            raise ConfigError(
                "buffer",
                f"the drainer writes {sink.conn.name} with op_type='create' (a re-read record "
                "is a 409, never a second version); op_type='index' is not drained",
            )

    @staticmethod
    def guarantee(sink: SearchSink) -> Guarantee:
        return Guarantee(
            "EXACTLY ONCE, IDEMPOTENT then offsets",
            "bulk create with _id = record ID (a re-sent record is a 409), then the offsets "
            "document written with if_seq_no/if_primary_term and read back by realtime GET.",
        )

    def __init__(
        self,
        sink: SearchSink,
        topic: str,
        application_name: str = "",
        writer: int = 0,
        writers: int = 1,
        member: tuple[int, int] = (0, 1),
    ) -> None:
        self.sink = sink
        self.topic = topic
        self.doc_id = offsets_doc_id(sink.query_name, sink.sink_name, topic)
        self.application_name = application_name
        self._ownership = Ownership(writer, writers, *member)
        self._epoch_key = json.dumps(sink.epoch_field).encode()
        self.held: dict[int, int] = {}
        self._stored: dict[int, int] = {}  # every partition's, as last read or written
        self._seq: tuple[int, int] | None = None  # (_seq_no, _primary_term) of that version
        self._es: Client | None = None

    @property
    def where(self) -> str:
        return f"{self.sink.conn.name} at {self.sink.conn.where} ({self.sink.sink_name})"

    def owns(self, partition: int) -> bool:
        return self._ownership.owns(partition)

    # -- connection ----------------------------------------------------------------------

    @property
    def client(self) -> Client:
        if self._es is None:
            self._es = self.sink.conn.client()
        return self._es

    def _call(self, what: str, fn: Callable[[Client], T]) -> T:
        return call(self.sink.conn, self.client, self.sink.retry, what, fn)

    def close(self) -> None:
        es, self._es = self._es, None
        if es is not None:
            es.close()

    # -- offsets -------------------------------------------------------------------------

    def ensure(self) -> None:
        """The sink's preflight (cluster, credentials, indices created if missing), and the
        offsets document's fields in the control index's mapping."""
        self.sink.preflight()
        index = self.sink.control_index
        try:
            self._call(
                "adding the drain offsets to the control index's mapping",
                lambda c: c.put_mapping(index, DRAIN_FIELDS),
            )
        except BadRequest as exc:
            raise ConfigError(
                "control_index",
                f"{index!r} cannot hold the drain offsets ({DRAIN_FIELDS}): {exc.message}",
            ) from None

    def read_offsets(self) -> dict[int, int]:
        """Every partition's stored offset (a realtime GET of the offsets document)."""
        self._reload()
        self.held = owned(self, self._stored)
        return dict(self._stored)

    def _reload(self) -> None:
        try:
            doc = self._call(
                "reading the drain offsets",
                lambda c: c.get(self.sink.control_index, self.doc_id),
            )
        except NotFound:
            self._stored, self._seq = {}, None
            return
        offsets = doc["_source"].get("offsets") or {}
        self._stored = {int(p): int(o) for p, o in offsets.items()}
        self._seq = (int(doc["_seq_no"]), int(doc["_primary_term"]))

    def reset_offsets(self) -> int:
        self._reload()
        n = len(self._stored)
        if self._seq is not None:
            with contextlib.suppress(NotFound):  # gone already
                self._call(
                    "resetting the drain offsets",
                    lambda c: c.delete(self.sink.control_index, self.doc_id),
                )
        self._stored, self._seq, self.held = {}, None, {}
        return n

    # -- one share -----------------------------------------------------------------------

    def write_share(self, share: Share) -> Counts:
        """Records (bulk ``create``, retried item by item), dead letters, then the offsets."""
        actions, where, letters = self._actions(share)
        tally = _Tally()
        if actions:
            first = [True]

            def answered() -> None:  # the crash point, once: after the first answer
                if first[0]:
                    first[0] = False
                    crash_point("drain_mid_write", share.n)

            refused = self._sender(share).send(actions, "drained records", tally, answered)
            source = share.chunk.source
            letters += [
                (source(*where[pos]), f"refused by the sink: {why}") for pos, why in refused
            ]
        letters = share.bad + letters
        if letters:
            share.dead_letter(letters)
        self._store(owned(self, share.offsets))
        return tally.written, tally.duplicates, len(letters)

    def _sender(self, share: Share) -> BulkSender:
        epoch = max((share.chunk.epochs[i] for i in share.where), default=0)
        s = self.sink
        return BulkSender(
            self.client,
            s.conn,
            s.retry,
            s.bulk_max_actions,
            s.bulk_max_bytes,
            epoch,
            answers=ITEM_ANSWERS,  # a statuses-only answer: a fifth of a drain's CPU parsed it
        )

    def _actions(self, share: Share) -> tuple[list[Action], list[Record], list[Letter]]:
        """The share's records as bulk ``create`` actions (with each one's place in the chunk,
        for its dead letter), and the records that cannot be documents. A value Elasticsearch
        cannot parse (not UTF-8, not a JSON object) is left for it to refuse, with its
        reason, item by item."""
        chunk, key = share.chunk, self._epoch_key
        header = b'{"create":{"_index":%s,"_id":"%%s"}}' % json.dumps(self.sink.index).encode()
        actions: list[Action] = []
        where: list[Record] = []
        letters: list[Letter] = []
        epochs = chunk.epochs
        for i, k, rid, value in chunk.records(share.where):
            source = None if value is None else with_epoch(value, key, epochs[i])
            if source is None:
                problem = value_problem(value) or "undecodable value: not a JSON object"
                letters.append((chunk.source(i, k, rid, value), problem))
                continue
            actions.append((RawHeader(header % rid.lower()), source))  # rid: 32 hex digits
            where.append((i, k, rid, value))
        return actions, where, letters

    def _store(self, new: dict[int, int]) -> None:
        """Write this writer's new offsets into the document, compared-and-set."""
        if new == self.held:
            return
        while True:
            merged = {**self._stored, **new}
            try:
                reply = self._write_offsets(merged)
            except Conflict:
                self._reload()  # who moved it?
                if owned(self, self._stored) != self.held:
                    raise OffsetsMovedError(
                        f"{self.where}: stored offsets {owned(self, self._stored)} differ from "
                        f"the drainer's {self.held}"
                    ) from None
                continue  # another writer of ours moved its own partitions: merge, again
            self._stored, self.held = merged, new
            self._seq = (int(reply["_seq_no"]), int(reply["_primary_term"]))
            return

    def _write_offsets(self, offsets: dict[int, int]) -> Any:
        document = {
            "kind": KIND,
            "query_name": self.sink.query_name,
            "sink": self.sink.sink_name,
            "topic": self.topic,
            "offsets": {str(p): o for p, o in sorted(offsets.items())},
            "updated_at": int(time.time() * 1000),
        }
        index, seq = self.sink.control_index, self._seq
        if seq is None:
            return self._call(
                "creating the drain offsets", lambda c: c.create(index, self.doc_id, document)
            )
        return self._call(
            "writing the drain offsets",
            lambda c: c.index_if(index, self.doc_id, document, seq[0], seq[1]),
        )


__all__ = ["DRAIN_FIELDS", "SearchDrainTarget", "offsets_doc_id", "with_epoch"]
