"""What the sink's check and rewind (:mod:`.check`, :mod:`.rewind`) use of an
:class:`~exactlyonce.connectors.elasticsearch.sink.ElasticsearchSink`: its public parts, named
here so that they depend on these and not on the sink's module (no import cycle)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

if TYPE_CHECKING:
    from elasticsearch import Elasticsearch

    from exactlyonce.connectors.base.upsert import UpsertSpec
    from exactlyonce.connectors.elasticsearch.config import OpType
    from exactlyonce.connectors.elasticsearch.connection import EsConnection
    from exactlyonce.connectors.elasticsearch.head import ElasticsearchHeadStore
    from exactlyonce.retry import RetryPolicy

T = TypeVar("T")


class ElasticsearchParts(Protocol):
    query_name: str
    conn: EsConnection
    index: str
    control_index: str
    dead_letter_index: str
    op_type: OpType
    epoch_field: str
    mapping: Any
    retry: RetryPolicy

    @property
    def sink_name(self) -> str: ...

    @property
    def upsert(self) -> UpsertSpec | None: ...

    @property
    def client(self) -> Elasticsearch:
        """The sink's client (opened on first use)."""
        ...

    def call(self, what: str, fn: Callable[[Elasticsearch], T]) -> T:
        """``fn`` on the client under the sink's retry policy."""
        ...

    def head_store(self) -> ElasticsearchHeadStore: ...
