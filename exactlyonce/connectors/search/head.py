"""The search sinks' :class:`~exactlyonce.connectors.base.head.HeadStore`: one
document ``<query>|<sink>`` in the control index, read by realtime GET and changed with
optimistic concurrency (``if_seq_no``/``if_primary_term``); shard commits are documents
``<query>|<sink>|<epoch>|<shard>`` beside it."""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable
from typing import Any, TypeVar

from exactlyonce.connectors.base.head import Head
from exactlyonce.connectors.search.engine import Client, Conflict, EngineError, NotFound
from exactlyonce.errors import SinkUnavailableError

log = logging.getLogger("exactlyonce")
T = TypeVar("T")

Call = Callable[[str, Callable[[Client], Any]], Any]


class SearchHeadStore:
    """The head of (``query_name``, ``sink_name``) in ``control_index``. ``call(what, fn)``
    runs ``fn`` on the sink's client under its retry policy (SinkUnavailableError naming
    ``what`` when it gives up)."""

    def __init__(self, call: Call, control_index: str, query_name: str, sink_name: str) -> None:
        self.call = call
        self.index = control_index
        self.query_name, self.sink_name = query_name, sink_name
        self.id = f"{query_name}|{sink_name}"

    def _document(self) -> dict[str, Any] | None:
        try:
            resp = self.call("reading the head", lambda c: c.get(self.index, self.id))
        except NotFound:
            return None
        return dict(resp)

    def read_head(self) -> Head | None:
        doc = self._document()
        if doc is None:
            return None
        src = doc["_source"]
        written = src.get("updated_at")
        advanced_at = int(written) / 1000 if isinstance(written, (int, float)) else None
        return Head(
            int(src["epoch"]), src.get("spark_query_id"), int(src["num_shards"]), advanced_at
        )

    def _source(self, head: Head) -> dict[str, Any]:
        return {
            "kind": "head",
            "query_name": self.query_name,
            "sink": self.sink_name,
            "epoch": head.epoch,
            "spark_query_id": head.spark_query_id,
            "num_shards": head.num_shards,
            "updated_at": int(time.time() * 1000),
        }

    def create_head(self, head: Head) -> None:
        # A 409: created already (a lost reply, or another driver); that head stands.
        with contextlib.suppress(Conflict):
            self.call(
                "creating the head", lambda c: c.create(self.index, self.id, self._source(head))
            )

    def update_head(self, change: Callable[[Head], Head | None]) -> Head:
        """Read, change and write back the head with optimistic concurrency (if_seq_no);
        returns the head as read last. A lost reply is retried by re-reading: the change is
        then either visible (done) or not (written again), never guessed."""
        while True:
            doc = self._document()
            if doc is None:
                raise SinkUnavailableError(f"{self.sink_name}: the head document disappeared")
            src = doc["_source"]
            current = Head(int(src["epoch"]), src.get("spark_query_id"), int(src["num_shards"]))
            new = change(current)
            if new is None:
                return current
            try:
                self.call(
                    "writing the head",
                    lambda c, d=doc, h=new: c.index_if(  # type: ignore[misc]
                        self.index, self.id, self._source(h), d["_seq_no"], d["_primary_term"]
                    ),
                )
                return current
            except Conflict:
                continue  # changed since we read it (or our own lost write): read again

    def bind_query_id(self, spark_query_id: str) -> None:
        self.update_head(
            lambda h: None if h.spark_query_id else Head(h.epoch, spark_query_id, h.num_shards)
        )

    def advance_head(self, epoch: int, spark_query_id: str | None) -> None:
        """The head moves to ``epoch``; then the epoch's shard commits, spent, are dropped
        (best effort: a leftover is below the head, never trusted)."""
        current = self.update_head(
            lambda h: (
                None
                if h.epoch >= epoch
                else Head(epoch, spark_query_id or h.spark_query_id, h.num_shards)
            )
        )
        ops = [
            {"delete": {"_index": self.index, "_id": f"{self.id}|{epoch}|{s}"}}
            for s in range(current.num_shards)
        ]
        try:
            self.call("dropping shard commits", lambda c: c.bulk(ops))
        except (SinkUnavailableError, EngineError) as exc:
            log.warning("%s: shard commits of epoch %d stay: %s", self.sink_name, epoch, exc)

    def reset_head(self) -> None:
        """Every control document of (query, sink), then the head, in one bulk request."""
        self.call("refreshing", lambda c: c.refresh(self.index))
        query = {
            "bool": {
                "filter": [
                    {"term": {"query_name": self.query_name}},
                    {"term": {"sink": self.sink_name}},
                ]
            }
        }
        found = self.call(
            "listing control documents",
            lambda c: c.search(self.index, query, 10_000),
        )
        ops = [
            {"delete": {"_index": self.index, "_id": hit["_id"]}} for hit in found["hits"]["hits"]
        ]
        ops.append({"delete": {"_index": self.index, "_id": self.id}})
        self.call("resetting the head", lambda c: c.bulk(ops))
