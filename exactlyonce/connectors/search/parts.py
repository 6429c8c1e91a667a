"""What the sink's check and rewind (:mod:`.check`, :mod:`.rewind`) use of a
:class:`~exactlyonce.connectors.search.sink.SearchSink`: its public parts, named here so that
they depend on these and not on the sink's module (no import cycle)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

if TYPE_CHECKING:
    from exactlyonce.connectors.base.upsert import UpsertSpec
    from exactlyonce.connectors.search.config import OpType
    from exactlyonce.connectors.search.connection import SearchConnection
    from exactlyonce.connectors.search.engine import Client
    from exactlyonce.connectors.search.head import SearchHeadStore
    from exactlyonce.retry import RetryPolicy

T = TypeVar("T")


class SearchParts(Protocol):
    query_name: str
    conn: SearchConnection
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
    def client(self) -> Client:
        """The sink's client (opened on first use)."""
        ...

    def call(self, what: str, fn: Callable[[Client], T]) -> T:
        """``fn`` on the client under the sink's retry policy."""
        ...

    def head_store(self) -> SearchHeadStore: ...
