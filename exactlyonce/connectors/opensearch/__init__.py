"""Exactly-once OpenSearch sink (client: opensearch-py, ``pip install 'exactlyonce[opensearch]'``).

Guarantee: every record of the stream is in the target index exactly once, under its record
ID as ``_id``, through driver crashes, executor loss, re-run micro-batches, rejected bulk
items, lost bulk replies and restarts of the OpenSearch node, provided the source replays and
nothing else writes those ``_id``\\ s. Modes as the Elasticsearch sink's: ``op_type``
``create`` (default) or ``index``, and ``mode="upsert"`` with the epoch as external version.

The protocol is the Elasticsearch family's, shared with the Elasticsearch sink:
:mod:`exactlyonce.connectors.search` tells the whole mechanism. This package holds what is
OpenSearch's own: the client (:mod:`.engine`: opensearch-py, its exceptions mapped onto the
protocol's), the config model (basic auth; no ``api_key``), and the registry entry
(:mod:`.kind`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from exactlyonce.lazy import lazy_exports

if TYPE_CHECKING:
    from exactlyonce.connectors.opensearch.config import OpenSearchSinkConfig, OpType
    from exactlyonce.connectors.opensearch.sink import OpenSearchSink

# Public name -> the module that defines it, imported when the name is first asked for.
_LAZY = {
    "OpType": "exactlyonce.connectors.opensearch.config",
    "OpenSearchSinkConfig": "exactlyonce.connectors.opensearch.config",
    "OpenSearchSink": "exactlyonce.connectors.opensearch.sink",
}


__all__ = ["OpType", "OpenSearchSink", "OpenSearchSinkConfig"]

__getattr__, __dir__ = lazy_exports(globals(), _LAZY)
