"""What a genuine OpenSearch node holds, read over plain HTTP (urllib): neither the sink's
client nor opensearch-py, so an audit of the sink cannot share its bugs.

Writes are counted per ``_id`` from the node itself: ``_version`` (every successful
index/create of an ``_id`` bumps it; a 409 does not). With ``op_type="index"`` a second write
of a record is a second version, which any reader sees; with ``create`` a re-send is a 409 and
leaves no trace. Upserts carry the epoch as their (external) version, so there ``_version``
is the epoch, not a count.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any

from tests.support.es_fixtures import read_index

__all__ = ["delete", "docs", "get", "read_index", "request", "versions"]


def request(url: str, method: str, path: str, body: Any = None) -> Any:
    """One JSON request; an HTTP error is raised as urllib's HTTPError."""
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(
        f"{url}/{path}", data=data, method=method, headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=30) as resp:
        return json.loads(resp.read())


def versions(url: str, index: str) -> dict[str, int]:
    """``_id`` -> ``_version`` of every document of ``index`` (``{}`` when it is absent)."""
    return {i: v for i, (v, _) in read_index(url, index).items()}


def docs(url: str, index: str) -> dict[str, dict[str, Any]]:
    """``_id`` -> ``_source`` of every document of ``index``."""
    return {i: src for i, (_, src) in read_index(url, index).items()}


def get(url: str, index: str, doc_id: str) -> dict[str, Any] | None:
    """A realtime GET of one document (None when absent)."""
    try:
        found: dict[str, Any] = request(url, "GET", f"{index}/_doc/{_quoted(doc_id)}")
    except urllib.error.HTTPError as exc:
        if exc.code == 404:
            return None
        raise
    return found


def delete(url: str, index: str, doc_id: str) -> None:
    """Delete one document (``refresh=true``), as a crash before it was written would leave."""
    request(url, "DELETE", f"{index}/_doc/{_quoted(doc_id)}?refresh=true")


def _quoted(doc_id: str) -> str:
    return urllib.request.quote(doc_id, safe="")
