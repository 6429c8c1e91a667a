"""Exactly-once Elasticsearch sink.

Guarantee: every record of the stream is in the target index exactly once, under its record
ID as ``_id``, through driver crashes, executor loss, re-run micro-batches, rejected bulk
items and lost bulk replies, provided the source replays and nothing else writes those
``_id``\\ s. With ``op_type="create"`` (default) each ``_id`` is written once and the first
version wins; with ``op_type="index"`` a re-sent record overwrites its own, identical copy.
``mode="upsert"`` keeps one document per key at the latest epoch (external versions).

The protocol is the Elasticsearch family's, shared with the OpenSearch sink:
:mod:`exactlyonce.connectors.search` tells the whole mechanism. This package holds what is
Elasticsearch's own: the client (:mod:`.engine`: elasticsearch-py, its exceptions mapped onto
the protocol's), the config model's name, and the registry entry (:mod:`.kind`).

Example::

    sink = ElasticsearchSink(hosts="https://es:9200", index="events", id_columns=["event_id"],
                             query_name="clicks-to-es", api_key=os.environ["ES_API_KEY"])
    df.writeStream.foreachBatch(sink).option("checkpointLocation", ckpt).start()
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from exactlyonce.lazy import lazy_exports

if TYPE_CHECKING:
    from exactlyonce.connectors.elasticsearch.config import ElasticsearchSinkConfig, OpType
    from exactlyonce.connectors.elasticsearch.sink import ElasticsearchSink
    from exactlyonce.connectors.search import (
        CONTROL_INDEX,
        CONTROL_MAPPING,
        DEAD_LETTER_MAPPING,
        ID_COLUMN,
        RETRY_STATUSES,
        RetryPolicy,
        default_policy,
        is_transient,
    )

# The Elasticsearch family's names, from its package (exactlyonce.connectors.search).
_FAMILY = (
    "CONTROL_INDEX",
    "CONTROL_MAPPING",
    "DEAD_LETTER_MAPPING",
    "ID_COLUMN",
    "RETRY_STATUSES",
    "RetryPolicy",
    "default_policy",
    "is_transient",
)
# Public name -> the module that defines it, imported when the name is first asked for.
_LAZY = {
    "ElasticsearchSinkConfig": "exactlyonce.connectors.elasticsearch.config",
    "OpType": "exactlyonce.connectors.elasticsearch.config",
    "ElasticsearchSink": "exactlyonce.connectors.elasticsearch.sink",
    **dict.fromkeys(_FAMILY, "exactlyonce.connectors.search"),
}


__all__ = [
    "CONTROL_INDEX",
    "CONTROL_MAPPING",
    "DEAD_LETTER_MAPPING",
    "ID_COLUMN",
    "RETRY_STATUSES",
    "ElasticsearchSink",
    "ElasticsearchSinkConfig",
    "OpType",
    "RetryPolicy",
    "default_policy",
    "is_transient",
]

__getattr__, __dir__ = lazy_exports(globals(), _LAZY)
