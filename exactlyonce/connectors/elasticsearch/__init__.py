"""Exactly-once Elasticsearch sink.

Guarantee: every record of the stream is in the target index exactly once, under its record
ID as ``_id``, through driver crashes, executor loss, re-run micro-batches, rejected bulk
items and lost bulk replies, provided the source replays and nothing else writes those
``_id``\\ s. With ``op_type="create"`` (default) each ``_id`` is written once and the first
version wins; with ``op_type="index"`` a re-sent record overwrites its own, identical copy.

Mechanism (Elasticsearch has no transactions, so idempotence carries the atomic step):

- each record gets a deterministic ID (``_id``) and its epoch (``epoch`` field), so every
  re-send of a record is a 409 (``create``) or an identical overwrite (``index``);
- executor tasks send their shard through ``helpers.streaming_bulk``, cut by count and bytes;
  only failed items are re-sent, on 429/5xx, with capped exponential backoff (an
  :class:`exactlyonce.retry.RetryPolicy`); a lost reply re-sends the items it left unknown
  (never new IDs);
  items Elasticsearch refuses for their content (400) go to the dead-letter index;
- only after every item of the shard is acknowledged, the task writes a shard-commit document
  ``{query}|{sink}|{epoch}|{shard}`` into the control index; a re-run reads those with a
  realtime ``mget`` (never search, which sees only refreshed documents) and skips them;
- the driver then advances the head document ``{query}|{sink}`` (epoch, Spark query id,
  shard count) with optimistic concurrency, and verifies it by a realtime GET when a reply
  is lost; epochs at or below the head are skipped whole after a restart.

``mode="upsert"`` (update and changelog streams): one document per key (``_id`` = the
record ID of ``id_columns``) holding the latest epoch's value. Every write is an ``index``
(or, for a row whose ``tombstone_column`` is true, a ``delete``) with ``version=<epoch>,
version_type=external_gte``: Elasticsearch itself applies it only if the epoch is at least
the document's version, so a re-run of an older epoch is a 409, counted ``stale``, never an
error, and a replay of the same epoch rewrites the same document. A delete leaves a
tombstone at its epoch, but Elasticsearch forgets tombstones after ``index.gc_deletes``
(60 s by default): a re-run of an epoch older than a delete, later than that, would bring
the document back. Raise ``index.gc_deletes`` on the index to cover how far back your
queries can be re-run (a restored checkpoint). No dedup catalog, no ``op_type``. Start
upserts on a fresh index: a document written before with internal versions (``_version`` 1
and up) refuses, as stale, every epoch below its version.

Example::

    sink = ElasticsearchSink(hosts="https://es:9200", index="events", id_columns=["event_id"],
                             query_name="clicks-to-es", api_key=os.environ["ES_API_KEY"])
    df.writeStream.foreachBatch(sink).option("checkpointLocation", ckpt).start()

Modules: :mod:`.sink` (:class:`ElasticsearchSink`, the driver side: settings, preflight, the
head), :mod:`.task` (the executor task), :mod:`.bulk` (bulk requests retrying only failed
items), :mod:`.connection` (:class:`EsConnection`, :func:`call`), :mod:`.policy` (what is
retried), :mod:`.schema` (index names, mappings, index creation).
"""

from __future__ import annotations

from exactlyonce.connectors.elasticsearch.bulk import Action, BulkSender, RawHeader
from exactlyonce.connectors.elasticsearch.config import ElasticsearchSinkConfig, OpType
from exactlyonce.connectors.elasticsearch.connection import EsConnection, call
from exactlyonce.connectors.elasticsearch.policy import (
    RETRY_STATUSES,
    RetryPolicy,
    default_policy,
    is_transient,
)
from exactlyonce.connectors.elasticsearch.schema import (
    CONTROL_INDEX,
    CONTROL_MAPPING,
    DEAD_LETTER_MAPPING,
    ID_COLUMN,
)
from exactlyonce.connectors.elasticsearch.sink import ElasticsearchSink
from exactlyonce.connectors.elasticsearch.task import (
    ElasticsearchShardWriter,
    EsShardTask,
    EsTarget,
)

__all__ = [
    "CONTROL_INDEX",
    "CONTROL_MAPPING",
    "DEAD_LETTER_MAPPING",
    "ID_COLUMN",
    "RETRY_STATUSES",
    "Action",
    "BulkSender",
    "ElasticsearchShardWriter",
    "ElasticsearchSink",
    "ElasticsearchSinkConfig",
    "EsConnection",
    "EsShardTask",
    "EsTarget",
    "OpType",
    "RawHeader",
    "RetryPolicy",
    "call",
    "default_policy",
    "is_transient",
]
