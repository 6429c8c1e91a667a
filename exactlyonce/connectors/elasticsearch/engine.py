"""elasticsearch-py as the protocol's :class:`~exactlyonce.connectors.search.engine.Engine`:
the client built from a connection, and its exceptions mapped onto the protocol's, here only.

elasticsearch-py 8/9 raises ``ApiError`` subclasses for HTTP answers and elastic-transport's
``ConnectionError``/``ConnectionTimeout`` (``TlsError`` among them) when no answer came; its
``helpers.streaming_bulk`` lets a lost connection out as such (items answered before it were
yielded), so it becomes :class:`Unreachable` with nothing of that request yielded.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from elastic_transport import ConnectionTimeout, TlsError
from elasticsearch import (
    ApiError,
    AuthenticationException,
    AuthorizationException,
    BadRequestError,
    ConflictError,
    Elasticsearch,
    NotFoundError,
    helpers,
)
from elasticsearch import ConnectionError as EsConnectionError

from exactlyonce.connectors.search.engine import (
    BadRequest,
    Conflict,
    CredentialsRefused,
    EngineError,
    NotFound,
    Reach,
    TlsFailed,
    Unreachable,
)

_BY_CLASS: tuple[tuple[type[ApiError], type[EngineError]], ...] = (
    (NotFoundError, NotFound),
    (ConflictError, Conflict),
    (BadRequestError, BadRequest),
    (AuthenticationException, CredentialsRefused),
    (AuthorizationException, CredentialsRefused),
)


def translated(exc: BaseException) -> BaseException:
    """``exc`` as the protocol's error (unchanged when it is none of the client's)."""
    if isinstance(exc, ApiError):
        mapped = next((ours for theirs, ours in _BY_CLASS if isinstance(exc, theirs)), EngineError)
        return mapped(exc.status_code, str(exc.message))
    if isinstance(exc, TlsError):
        return TlsFailed(str(exc))
    if isinstance(exc, (EsConnectionError, ConnectionTimeout)):
        return Unreachable(str(exc))
    return exc


@contextmanager
def _ours() -> Iterator[None]:
    try:
        yield
    except (ApiError, EsConnectionError, ConnectionTimeout) as exc:
        raise translated(exc) from None


def _as_is(action: Any) -> Any:
    return action


class EsClient:
    """:class:`~exactlyonce.connectors.search.engine.Client` over an ``Elasticsearch``."""

    def __init__(self, es: Elasticsearch) -> None:
        self.es = es

    def info(self) -> dict[str, Any]:
        with _ours():
            return dict(self.es.info().body)

    def get(self, index: str, doc_id: str) -> dict[str, Any]:
        with _ours():
            return dict(self.es.get(index=index, id=doc_id, realtime=True).body)

    def mget_found(self, index: str, ids: Sequence[str]) -> list[dict[str, Any]]:
        with _ours():
            answer = self.es.mget(index=index, ids=list(ids), source=False, realtime=True)
        return list(answer["docs"])

    def create(self, index: str, doc_id: str, document: dict[str, Any]) -> dict[str, Any]:
        with _ours():
            return dict(self.es.create(index=index, id=doc_id, document=document).body)

    def index_if(
        self, index: str, doc_id: str, document: dict[str, Any], seq_no: int, primary_term: int
    ) -> dict[str, Any]:
        with _ours():
            return dict(
                self.es.index(
                    index=index,
                    id=doc_id,
                    document=document,
                    if_seq_no=seq_no,
                    if_primary_term=primary_term,
                ).body
            )

    def delete(self, index: str, doc_id: str) -> dict[str, Any]:
        with _ours():
            return dict(self.es.delete(index=index, id=doc_id).body)

    def bulk(self, operations: list[dict[str, Any]]) -> dict[str, Any]:
        with _ours():
            return dict(self.es.bulk(operations=operations).body)

    def search(self, index: str, query: dict[str, Any], size: int, start: int = 0) -> Any:
        with _ours():
            return dict(self.es.search(index=index, query=query, size=size, from_=start).body)

    def count(self, index: str, query: dict[str, Any]) -> int:
        with _ours():
            return int(self.es.count(index=index, query=query)["count"])

    def refresh(self, index: str) -> None:
        with _ours():
            self.es.indices.refresh(index=index)

    def index_exists(self, index: str) -> bool:
        with _ours():
            return bool(self.es.indices.exists(index=index))

    def create_index(self, index: str, mappings: dict[str, Any]) -> None:
        with _ours():
            self.es.indices.create(index=index, mappings=mappings)

    def get_mapping(self, index: str) -> dict[str, Any]:
        with _ours():
            return dict(self.es.indices.get_mapping(index=index).body)

    def put_mapping(self, index: str, properties: dict[str, Any]) -> None:
        with _ours():
            self.es.indices.put_mapping(index=index, properties=properties)

    def streaming_bulk(
        self,
        actions: Iterator[tuple[Any, Any]],
        chunk_size: int,
        max_chunk_bytes: int,
        filter_path: str | None,
    ) -> Iterator[tuple[bool, dict[str, Any]]]:
        params: dict[str, Any] = {"filter_path": filter_path} if filter_path else {}
        with _ours():
            yield from helpers.streaming_bulk(
                self.es,
                actions,  # type: ignore[arg-type]
                chunk_size=chunk_size,
                max_chunk_bytes=max_chunk_bytes,
                expand_action_callback=_as_is,
                raise_on_error=False,
                raise_on_exception=False,
                **params,
            )

    def scan(self, index: str, query: dict[str, Any], size: int, scroll: str) -> Iterator[Any]:
        with _ours():
            yield from helpers.scan(self.es, index=index, query=query, size=size, scroll=scroll)

    def close(self) -> None:
        self.es.close()


@dataclass(frozen=True)
class ElasticsearchEngine:
    """elasticsearch-py (8 or 9): the official client, which talks to Elasticsearch only."""

    name: str = "Elasticsearch"

    def connect(self, conn: Reach) -> EsClient:
        tls: dict[str, Any] = {"ca_certs": conn.ca_certs} if conn.ca_certs else {}
        return EsClient(
            Elasticsearch(
                list(conn.hosts),
                api_key=conn.api_key.reveal() if conn.api_key else None,
                basic_auth=(conn.user or "", conn.password.reveal()) if conn.password else None,
                verify_certs=conn.verify_certs,
                **tls,
                request_timeout=conn.request_timeout,
                max_retries=0,  # every retry is ours: RetryPolicy, with deterministic _ids
                retry_on_timeout=False,
            )
        )


ELASTICSEARCH = ElasticsearchEngine()
