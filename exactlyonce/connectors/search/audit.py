"""The audit of the Elasticsearch family's sinks: every document of the index, read with a
scroll (the client's ``helpers.scan``, ``_doc`` order), counted by ``_id`` (the record ID), with
its ``_version``. A version above 1 means the ``_id`` was written more than once: reported as
"rewritten" in insert mode, and counted as a duplicate write with ``op_type: create`` (whose
every write creates; an overwrite is a second write). In upsert mode a key is rewritten by
design and versions are not reported. Dead letters: the query's documents in the dead-letter
index. Read-only: a missing index counts as empty."""

from __future__ import annotations

from collections import Counter
from typing import Any

from exactlyonce.connectors.base.audit import SinkAudit
from exactlyonce.connectors.base.expected import Expected
from exactlyonce.connectors.search.connection import call
from exactlyonce.connectors.search.engine import Client
from exactlyonce.connectors.search.sink import SearchSink
from exactlyonce.progress import Progress

SCROLL_PAGE = 5_000
SCROLL_KEEP_ALIVE = "5m"


def read_index(sink: SearchSink, expected: Expected) -> SinkAudit:
    """Documents per ``_id`` of the sink's index with their versions, dead letters, head."""
    client = sink.conn.client()
    try:
        versions = call(
            sink.conn, client, sink.retry, f"reading index {sink.index!r}",
            lambda es: _versions(es, sink.index, len(expected)),
        )  # fmt: skip
        dead = call(
            sink.conn, client, sink.retry, f"counting dead letters in {sink.dead_letter_index!r}",
            lambda es: _dead_letters(es, sink.dead_letter_index, sink.query_name, sink.sink_name),
        )  # fmt: skip
    finally:
        client.close()
    insert = sink.upsert is None
    head = sink.head()
    return SinkAudit(
        query_name=sink.query_name,
        sink=sink.sink_name,
        kind=sink.kind,
        read_with=f"index {sink.index}, _version per _id",
        unit="documents in index",
        expected=expected,
        counts=Counter(dict.fromkeys(versions, 1)),
        rewritten={i: v for i, v in versions.items() if v > 1} if insert else {},
        rewritten_is_duplicate=insert and sink.op_type == "create",
        head_epoch=head.epoch if head else None,
        dead_letters=dead,
    )


def _versions(es: Client, index: str, expected: int) -> dict[str, int]:
    """``_id`` -> ``_version`` of every document (refreshed first: a search sees only what
    was refreshed); empty when the index does not exist."""
    if not es.index_exists(index):
        return {}
    es.refresh(index)
    versions: dict[str, int] = {}
    query: dict[str, Any] = {"version": True, "_source": False}  # scan sorts by _doc
    with Progress(f"audit {index}", total=expected, unit="docs") as progress:
        hits = es.scan(index, query, SCROLL_PAGE, SCROLL_KEEP_ALIVE)
        for n, hit in enumerate(hits, 1):
            versions[hit["_id"]] = int(hit.get("_version", 1))
            if n % SCROLL_PAGE == 0:
                progress.update(SCROLL_PAGE)
        progress.update(len(versions) - progress.done)
    return versions


def _dead_letters(es: Client, index: str, query_name: str, sink_name: str) -> int:
    if not es.index_exists(index):
        return 0
    es.refresh(index)
    terms = [{"term": {"query_name": query_name}}, {"term": {"sink": sink_name}}]
    return es.count(index, {"bool": {"filter": terms}})
