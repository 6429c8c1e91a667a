"""The seam between the protocol and a client library: :class:`Engine` and :class:`Client`.

The protocol (bulk, head, check, rewind, drain, schema, task) is written once, against
:class:`Client`: the few requests it makes, with plain dicts in and out, and failures raised
as the errors below, never as a client library's own. An engine (one module per client:
``connectors/elasticsearch/engine.py`` for elasticsearch-py, ``connectors/opensearch/engine.py``
for opensearch-py) builds its client from a :class:`Reach` (a connection's settings) and maps
that library's exceptions onto these, in one place. Nothing here imports a client library.

The errors keep their data in ``args``, so they pickle (Spark moves exceptions between
processes).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any, Protocol

from exactlyonce.secrets import Secret


class EngineError(Exception):
    """The engine answered with HTTP ``status``; ``message`` is its error type (or text)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(status, message)

    @property
    def status_code(self) -> int:
        return int(self.args[0])

    @property
    def message(self) -> str:
        return str(self.args[1])

    def __str__(self) -> str:
        return f"HTTP {self.status_code} {self.message}"


class NotFound(EngineError):
    """404: no such document or index."""


class Conflict(EngineError):
    """409: a ``create`` of an existing ``_id``, a stale version or sequence number."""


class BadRequest(EngineError):
    """400: refused for its content (a mapping, an index that exists already...)."""


class CredentialsRefused(EngineError):
    """401 or 403: the credentials were refused."""


class Unreachable(Exception):
    """No answer: a lost connection or a timeout. A request may have been applied."""


class TlsFailed(Exception):
    """TLS could not be set up: configuration, never retried."""


class Client(Protocol):
    """The requests the protocol makes; an engine's adapter around its client library.

    Every method raises :class:`EngineError` (or a subclass), :class:`Unreachable` or
    :class:`TlsFailed`, and returns plain dicts.
    """

    def info(self) -> dict[str, Any]: ...

    def get(self, index: str, doc_id: str) -> dict[str, Any]:
        """A realtime GET (never a search, which sees only refreshed documents)."""
        ...

    def mget_found(self, index: str, ids: Sequence[str]) -> list[dict[str, Any]]:
        """A realtime ``mget`` without sources: the ``docs`` of the answer, in order."""
        ...

    def create(self, index: str, doc_id: str, document: dict[str, Any]) -> dict[str, Any]: ...

    def index_if(
        self, index: str, doc_id: str, document: dict[str, Any], seq_no: int, primary_term: int
    ) -> dict[str, Any]:
        """Index ``document`` only if the stored one is still at (``seq_no``, ``primary_term``)."""
        ...

    def delete(self, index: str, doc_id: str) -> dict[str, Any]: ...

    def bulk(self, operations: list[dict[str, Any]]) -> dict[str, Any]: ...

    def search(self, index: str, query: dict[str, Any], size: int, start: int = 0) -> Any: ...

    def count(self, index: str, query: dict[str, Any]) -> int: ...

    def refresh(self, index: str) -> None: ...

    def index_exists(self, index: str) -> bool: ...

    def create_index(self, index: str, mappings: dict[str, Any]) -> None: ...

    def get_mapping(self, index: str) -> dict[str, Any]: ...

    def put_mapping(self, index: str, properties: dict[str, Any]) -> None: ...

    def streaming_bulk(
        self,
        actions: Iterator[tuple[Any, Any]],
        chunk_size: int,
        max_chunk_bytes: int,
        filter_path: str | None,
    ) -> Iterator[tuple[bool, dict[str, Any]]]:
        """The client's ``helpers.streaming_bulk`` over (header, source) pairs (either may be
        JSON bytes), never raising on an item: ``(ok, {op: info})`` per action, in order. A
        request that got no answer raises :class:`Unreachable` before any of its items."""
        ...

    def scan(self, index: str, query: dict[str, Any], size: int, scroll: str) -> Iterator[Any]:
        """Every hit of ``query`` (a scroll, ``_doc`` order)."""
        ...

    def close(self) -> None: ...


class Reach(Protocol):
    """What an engine reads to build its client: a
    :class:`~exactlyonce.connectors.search.connection.SearchConnection`."""

    @property
    def hosts(self) -> tuple[str, ...]: ...

    @property
    def api_key(self) -> Secret | None: ...

    @property
    def user(self) -> str | None: ...

    @property
    def password(self) -> Secret | None: ...

    @property
    def ca_certs(self) -> str | None: ...

    @property
    def verify_certs(self) -> bool: ...

    @property
    def request_timeout(self) -> float: ...


class Engine(Protocol):
    """One client library. Instances are picklable values (Spark ships them to executors)."""

    @property
    def name(self) -> str:
        """The engine's name in messages and checks: ``Elasticsearch``, ``OpenSearch``."""
        ...

    def connect(self, conn: Reach) -> Client:
        """A client for ``conn`` with no retries of its own (every retry is the sink's)."""
        ...
