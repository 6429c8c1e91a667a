"""Elasticsearch's entry in the sink registry (:mod:`exactlyonce.connectors.registry`)."""

from __future__ import annotations

from exactlyonce.connectors.elasticsearch.config import ElasticsearchSinkConfig
from exactlyonce.connectors.search.kind import search_kind

KIND = search_kind(
    "elasticsearch",
    ElasticsearchSinkConfig,
    "exactlyonce.connectors.elasticsearch.sink:ElasticsearchSink",
)
