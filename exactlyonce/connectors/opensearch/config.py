"""The OpenSearch sink's settings: the family's (:mod:`exactlyonce.connectors.search.config`)
under the registry name ``opensearch``, less ``api_key`` (Elasticsearch's API keys; OpenSearch's
security plugin takes ``username``/``password``)."""

from __future__ import annotations

from typing import Literal

from pydantic import model_validator

from exactlyonce.connectors.base.config import field_error
from exactlyonce.connectors.search.config import Mode, OpType, SearchSinkConfig


class OpenSearchSinkConfig(SearchSinkConfig):
    """:class:`~exactlyonce.connectors.opensearch.OpenSearchSink`'s settings.

    Credentials: ``username`` with ``password`` (HTTP basic auth). ``mode="upsert"`` writes each
    document with ``index`` and the epoch as its external version
    (``version_type=external_gte``), so it takes no ``op_type``.
    """

    type: Literal["opensearch"] = "opensearch"

    @model_validator(mode="after")
    def _no_api_key(self) -> OpenSearchSinkConfig:
        if self.api_key is not None:
            raise field_error(
                "api_key",
                "OpenSearch takes username and password (basic auth); api_key is Elasticsearch's",
            )
        return self


__all__ = ["Mode", "OpType", "OpenSearchSinkConfig"]
