"""OpenSearch's entry in the sink registry (:mod:`exactlyonce.connectors.registry`)."""

from __future__ import annotations

from exactlyonce.connectors.opensearch.config import OpenSearchSinkConfig
from exactlyonce.connectors.search.kind import search_kind

KIND = search_kind(
    "opensearch", OpenSearchSinkConfig, "exactlyonce.connectors.opensearch.sink:OpenSearchSink"
)
