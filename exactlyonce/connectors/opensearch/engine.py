"""opensearch-py as the protocol's :class:`~exactlyonce.connectors.search.engine.Engine`: the
client built from a connection, and its exceptions mapped onto the protocol's, here only.

Where opensearch-py differs from elasticsearch-py, and what this module does about it:

- every error is a ``TransportError`` (status, error, info); a connection that got no answer
  is a ``ConnectionError`` (``ConnectionTimeout``, ``SSLError``) with status ``'N/A'``;
- requests take ``body=`` (no ``document=``/``query=``/``mappings=``) and answer plain dicts;
- its ``helpers.streaming_bulk`` catches a lost connection too and reports each action of
  that request as failed, with the exception in the item: :meth:`OsClient.streaming_bulk`
  raises it as :class:`Unreachable` on the first such item instead, so the protocol re-sends
  exactly what was left unknown, as with elasticsearch-py;
- its bulk chunker measures each line with ``str.encode``: a header or source given as JSON
  bytes is handed over as a dict (a header) or text (a source).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from exactlyonce.connectors.search.bulk import RawHeader
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

try:
    from opensearchpy import (
        AuthenticationException,
        AuthorizationException,
        ConflictError,
        NotFoundError,
        OpenSearch,
        RequestError,
        SSLError,
        TransportError,
        helpers,
    )
    from opensearchpy import ConnectionError as OsConnectionError
except ImportError as exc:  # the optional extra
    raise ImportError(
        "OpenSearchSink needs opensearch-py: pip install 'exactlyonce[opensearch]'"
    ) from exc

_BY_CLASS: tuple[tuple[type[TransportError], type[EngineError]], ...] = (
    (NotFoundError, NotFound),
    (ConflictError, Conflict),
    (RequestError, BadRequest),
    (AuthenticationException, CredentialsRefused),
    (AuthorizationException, CredentialsRefused),
)


def translated(exc: BaseException) -> BaseException:
    """``exc`` as the protocol's error (unchanged when it is none of the client's)."""
    if isinstance(exc, SSLError):
        return TlsFailed(str(exc))
    if isinstance(exc, OsConnectionError):  # ConnectionTimeout among them
        return Unreachable(str(exc))
    if isinstance(exc, TransportError) and isinstance(exc.status_code, int):
        mapped = next((ours for theirs, ours in _BY_CLASS if isinstance(exc, theirs)), EngineError)
        return mapped(exc.status_code, str(exc.error))
    return exc


@contextmanager
def _ours() -> Iterator[None]:
    try:
        yield
    except TransportError as exc:
        raise translated(exc) from None


def _expand(action: Any) -> tuple[Any, Any]:
    header, source = action
    if isinstance(header, RawHeader):
        header = header.copy()
    if isinstance(source, bytes):
        source = source.decode()
    return header, source


class OsClient:
    """:class:`~exactlyonce.connectors.search.engine.Client` over an ``OpenSearch`` client."""

    def __init__(self, client: OpenSearch) -> None:
        self.os = client

    def info(self) -> dict[str, Any]:
        with _ours():
            return dict(self.os.info())

    def get(self, index: str, doc_id: str) -> dict[str, Any]:
        with _ours():
            return dict(self.os.get(index=index, id=doc_id, realtime=True))

    def mget_found(self, index: str, ids: Sequence[str]) -> list[dict[str, Any]]:
        with _ours():
            answer = self.os.mget(
                index=index, body={"ids": list(ids)}, _source=False, realtime=True
            )
        return list(answer["docs"])

    def create(self, index: str, doc_id: str, document: dict[str, Any]) -> dict[str, Any]:
        with _ours():
            return dict(self.os.create(index=index, id=doc_id, body=document))

    def index_if(
        self, index: str, doc_id: str, document: dict[str, Any], seq_no: int, primary_term: int
    ) -> dict[str, Any]:
        with _ours():
            return dict(
                self.os.index(
                    index=index,
                    id=doc_id,
                    body=document,
                    if_seq_no=seq_no,
                    if_primary_term=primary_term,
                )
            )

    def delete(self, index: str, doc_id: str) -> dict[str, Any]:
        with _ours():
            return dict(self.os.delete(index=index, id=doc_id))

    def bulk(self, operations: list[dict[str, Any]]) -> dict[str, Any]:
        with _ours():
            return dict(self.os.bulk(body=operations))

    def search(self, index: str, query: dict[str, Any], size: int, start: int = 0) -> Any:
        with _ours():
            return dict(self.os.search(index=index, body={"query": query}, size=size, from_=start))

    def count(self, index: str, query: dict[str, Any]) -> int:
        with _ours():
            return int(self.os.count(index=index, body={"query": query})["count"])

    def refresh(self, index: str) -> None:
        with _ours():
            self.os.indices.refresh(index=index)

    def index_exists(self, index: str) -> bool:
        with _ours():
            return bool(self.os.indices.exists(index=index))

    def create_index(self, index: str, mappings: dict[str, Any]) -> None:
        with _ours():
            self.os.indices.create(index=index, body={"mappings": mappings})

    def get_mapping(self, index: str) -> dict[str, Any]:
        with _ours():
            return dict(self.os.indices.get_mapping(index=index))

    def put_mapping(self, index: str, properties: dict[str, Any]) -> None:
        with _ours():
            self.os.indices.put_mapping(index=index, body={"properties": properties})

    def streaming_bulk(
        self,
        actions: Iterator[tuple[Any, Any]],
        chunk_size: int,
        max_chunk_bytes: int,
        filter_path: str | None,
    ) -> Iterator[tuple[bool, dict[str, Any]]]:
        params: dict[str, Any] = {"filter_path": filter_path} if filter_path else {}
        with _ours():
            for ok, item in helpers.streaming_bulk(
                self.os,
                actions,
                chunk_size=chunk_size,
                max_chunk_bytes=max_chunk_bytes,
                expand_action_callback=_expand,
                raise_on_error=False,
                raise_on_exception=False,
                **params,
            ):
                if not ok:
                    failure = next(iter(item.values())).get("exception")
                    if isinstance(failure, OsConnectionError):  # no answer: outcome unknown
                        raise translated(failure)
                yield ok, item

    def scan(self, index: str, query: dict[str, Any], size: int, scroll: str) -> Iterator[Any]:
        with _ours():
            yield from helpers.scan(self.os, index=index, query=query, size=size, scroll=scroll)

    def close(self) -> None:
        self.os.close()


@dataclass(frozen=True)
class OpenSearchEngine:
    """opensearch-py: OpenSearch's own client (the official Elasticsearch one refuses it)."""

    name: str = "OpenSearch"

    def connect(self, conn: Reach) -> OsClient:
        tls: dict[str, Any] = {"ca_certs": conn.ca_certs} if conn.ca_certs else {}
        auth = (conn.user or "", conn.password.reveal()) if conn.password else None
        return OsClient(
            OpenSearch(
                list(conn.hosts),
                http_auth=auth,
                verify_certs=conn.verify_certs,
                **tls,
                timeout=conn.request_timeout,
                max_retries=0,  # every retry is ours: RetryPolicy, with deterministic _ids
                retry_on_timeout=False,
            )
        )


OPENSEARCH = OpenSearchEngine()
