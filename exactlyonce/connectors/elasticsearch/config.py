"""The Elasticsearch sink's settings: the family's (:mod:`exactlyonce.connectors.search.config`)
under the registry name ``elasticsearch``."""

from __future__ import annotations

from typing import Literal

from exactlyonce.connectors.search.config import Mode, OpType, SearchSinkConfig


class ElasticsearchSinkConfig(SearchSinkConfig):
    """:class:`~exactlyonce.connectors.elasticsearch.ElasticsearchSink`'s settings.

    Credentials: ``api_key`` (the encoded key), or ``username`` with ``password``.
    ``mode="upsert"`` writes each document with ``index`` and the epoch as its external
    version (``version_type=external_gte``), so it takes no ``op_type``.
    """

    type: Literal["elasticsearch"] = "elasticsearch"


__all__ = ["ElasticsearchSinkConfig", "Mode", "OpType"]
