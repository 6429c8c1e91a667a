"""The protocol of the Elasticsearch family (Elasticsearch, OpenSearch), written once.

Both engines take the same requests and give the same answers for everything the protocol
relies on (bulk items with per-item statuses, realtime GET and ``mget``, optimistic
concurrency with ``if_seq_no``/``if_primary_term``, external versions); only their client
libraries differ: the official ``elasticsearch`` client refuses to talk to OpenSearch, and
``opensearch-py`` has its own exceptions and call signatures. So the client is a parameter:
:class:`~exactlyonce.connectors.search.engine.Engine` (one module per client, in the sink's
own package) builds it and maps its exceptions onto
:mod:`~exactlyonce.connectors.search.engine`'s; everything here is written against that
:class:`~exactlyonce.connectors.search.engine.Client` and imports no client library.

Mechanism (neither engine has transactions, so idempotence carries the atomic step):

- each record gets a deterministic ID (``_id``) and its epoch (``epoch`` field), so every
  re-send of a record is a 409 (``create``) or an identical overwrite (``index``);
- executor tasks send their shard through the client's ``helpers.streaming_bulk``, cut by
  count and bytes; only failed items are re-sent, on 429/5xx, with capped exponential
  backoff (an :class:`exactlyonce.retry.RetryPolicy`); a lost reply re-sends the items it
  left unknown (never new IDs); items the engine refuses for their content (400) go to the
  dead-letter index;
- only after every item of the shard is acknowledged, the task writes a shard-commit document
  ``{query}|{sink}|{epoch}|{shard}`` into the control index; a re-run reads those with a
  realtime ``mget`` (never search, which sees only refreshed documents) and skips them;
- the driver then advances the head document ``{query}|{sink}`` (epoch, Spark query id,
  shard count) with optimistic concurrency, and verifies it by a realtime GET when a reply
  is lost; epochs at or below the head are skipped whole after a restart.

``mode="upsert"`` (update and changelog streams): one document per key holding the latest
epoch's value, written with ``version=<epoch>, version_type=external_gte`` (a delete for a
tombstone), so the engine itself applies a write only if its epoch is at least the stored
one: a re-run of an older epoch is a 409, counted ``stale``. Deletes are guarded only for
``index.gc_deletes`` (60 s by default).

Modules: :mod:`.engine` (the seam), :mod:`.connection` (:class:`SearchConnection`,
:func:`call`), :mod:`.policy` (what is retried), :mod:`.bulk` (bulk requests retrying only
failed items), :mod:`.schema` (index names, mappings, creation), :mod:`.head` (the head
document), :mod:`.task` (the executor task), :mod:`.sink` (:class:`SearchSink`, the driver),
:mod:`.check`, :mod:`.rewind`, :mod:`.drain` (the buffer's target), :mod:`.audit`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from exactlyonce.lazy import lazy_exports

if TYPE_CHECKING:
    from exactlyonce.connectors.search.bulk import Action, BulkSender, RawHeader
    from exactlyonce.connectors.search.config import Mode, OpType, SearchSinkConfig
    from exactlyonce.connectors.search.connection import SearchConnection, call
    from exactlyonce.connectors.search.engine import Client, Engine
    from exactlyonce.connectors.search.policy import (
        RETRY_STATUSES,
        RetryPolicy,
        default_policy,
        is_transient,
    )
    from exactlyonce.connectors.search.schema import (
        CONTROL_INDEX,
        CONTROL_MAPPING,
        DEAD_LETTER_MAPPING,
        ID_COLUMN,
    )
    from exactlyonce.connectors.search.sink import SearchSink
    from exactlyonce.connectors.search.task import SearchShardTask, SearchShardWriter, SearchTarget

# Public name -> the module that defines it, imported when the name is first asked for.
_LAZY = {
    "Action": "exactlyonce.connectors.search.bulk",
    "BulkSender": "exactlyonce.connectors.search.bulk",
    "RawHeader": "exactlyonce.connectors.search.bulk",
    "Mode": "exactlyonce.connectors.search.config",
    "OpType": "exactlyonce.connectors.search.config",
    "SearchSinkConfig": "exactlyonce.connectors.search.config",
    "SearchConnection": "exactlyonce.connectors.search.connection",
    "call": "exactlyonce.connectors.search.connection",
    "Client": "exactlyonce.connectors.search.engine",
    "Engine": "exactlyonce.connectors.search.engine",
    "RETRY_STATUSES": "exactlyonce.connectors.search.policy",
    "RetryPolicy": "exactlyonce.connectors.search.policy",
    "default_policy": "exactlyonce.connectors.search.policy",
    "is_transient": "exactlyonce.connectors.search.policy",
    "CONTROL_INDEX": "exactlyonce.connectors.search.schema",
    "CONTROL_MAPPING": "exactlyonce.connectors.search.schema",
    "DEAD_LETTER_MAPPING": "exactlyonce.connectors.search.schema",
    "ID_COLUMN": "exactlyonce.connectors.search.schema",
    "SearchSink": "exactlyonce.connectors.search.sink",
    "SearchShardTask": "exactlyonce.connectors.search.task",
    "SearchShardWriter": "exactlyonce.connectors.search.task",
    "SearchTarget": "exactlyonce.connectors.search.task",
}


__all__ = [
    "CONTROL_INDEX",
    "CONTROL_MAPPING",
    "DEAD_LETTER_MAPPING",
    "ID_COLUMN",
    "RETRY_STATUSES",
    "Action",
    "BulkSender",
    "Client",
    "Engine",
    "Mode",
    "OpType",
    "RawHeader",
    "RetryPolicy",
    "SearchConnection",
    "SearchShardTask",
    "SearchShardWriter",
    "SearchSink",
    "SearchSinkConfig",
    "SearchTarget",
    "call",
    "default_policy",
    "is_transient",
]

__getattr__, __dir__ = lazy_exports(globals(), _LAZY)
