"""``exactlyonce rewind`` on a sink of the Elasticsearch family: the documents, dead letters and
shard commits of the epochs above N go, then the head document moves back to N.

Every document the sink writes carries its epoch in ``epoch_field`` (``_eo_epoch`` by
default), so the documents above N are found by a range query and deleted by ``_id`` (bulk
``delete``; a search, not ``_delete_by_query``, so any cluster and the test stand-in serve
it). With ``op_type="create"`` a document is only ever created: deleting those above N leaves
the index as it was when the head was N. With ``op_type="index"`` a document written again
above N carries the later epoch and goes too; the re-run of those epochs writes it again,
the same record. ``mode="upsert"`` is refused: a version written above N replaced the one an
earlier epoch wrote, which a delete cannot bring back.

Not atomic (Elasticsearch has no transaction): records, then dead letters, then shard
commits, then the head (with optimistic concurrency). A rewind cut short leaves the head
where it was; running it again finishes it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from exactlyonce.connectors.base.head import Head
from exactlyonce.connectors.base.rewind import Removal, count_by_epoch
from exactlyonce.connectors.search.engine import NotFound
from exactlyonce.errors import SinkUnavailableError

if TYPE_CHECKING:
    from exactlyonce.connectors.search.parts import SearchParts

PAGE = 5_000

UPSERT_REFUSAL = (
    "mode='upsert' keeps one document per key at the latest epoch (external versions): "
    "deleting the versions written above epoch N cannot bring back those of epochs at or "
    "below N that they replaced"
)


def refusal(sink: SearchParts) -> str | None:
    return UPSERT_REFUSAL if sink.upsert is not None else None


def _mine(sink: SearchParts, epoch: int, kind: str | None) -> dict[str, Any]:
    """Documents of this (query, sink) above ``epoch`` in the control or dead-letter index."""
    filters: list[dict[str, Any]] = [
        {"term": {"query_name": sink.query_name}},
        {"term": {"sink": sink.sink_name}},
        {"range": {"epoch": {"gt": epoch}}},
    ]
    if kind is not None:
        filters.append({"term": {"kind": kind}})
    return {"bool": {"filter": filters}}


def _places(sink: SearchParts, epoch: int) -> list[tuple[str, str, dict[str, Any], str]]:
    """(what, index, query, epoch field) of everything a rewind to ``epoch`` removes."""
    return [
        (
            f"documents of {sink.index}",
            sink.index,
            {"range": {sink.epoch_field: {"gt": epoch}}},
            sink.epoch_field,
        ),
        ("dead letters", sink.dead_letter_index, _mine(sink, epoch, None), "epoch"),
        ("shard commits", sink.control_index, _mine(sink, epoch, "shard_commit"), "epoch"),
    ]


def _page(sink: SearchParts, index: str, query: dict[str, Any], start: int) -> list[Any]:
    """One page of hits (refreshed first, so every acknowledged write is seen)."""
    try:
        sink.call("refreshing", lambda c: c.refresh(index))
        found = sink.call(
            "searching what a rewind removes", lambda c: c.search(index, query, PAGE, start)
        )
    except NotFound:  # the index does not exist: nothing in it
        return []
    return list(found["hits"]["hits"])


def _epoch_of(hit: dict[str, Any], field: str) -> int:
    return int(hit["_source"][field])


def removals_above(sink: SearchParts, epoch: int) -> list[Removal]:
    """Per index, the documents above ``epoch`` per epoch (paged searches); read-only."""
    out = []
    for what, index, query, field in _places(sink, epoch):
        epochs: list[int] = []
        while page := _page(sink, index, query, len(epochs)):
            epochs += [_epoch_of(hit, field) for hit in page]
            if len(page) < PAGE:
                break
        out.append(Removal(what, count_by_epoch(epochs, epoch)))
    return out


def rewind_to(sink: SearchParts, epoch: int) -> list[Removal]:
    """Delete what :func:`removals_above` lists, page by page, then move the head back."""
    out = []
    for what, index, query, field in _places(sink, epoch):
        epochs: list[int] = []
        while page := _page(sink, index, query, 0):
            epochs += [_epoch_of(hit, field) for hit in page]
            ops = [{"delete": {"_index": index, "_id": hit["_id"]}} for hit in page]
            answer = sink.call(
                "deleting what a rewind removes",
                lambda c, o=ops: c.bulk(o),  # type: ignore[misc]
            )
            failed = [
                item["delete"]
                for item in answer["items"]
                if item["delete"].get("status") not in (200, 404)
            ]
            if failed:
                raise SinkUnavailableError(f"{sink}: a rewind could not delete {failed[:3]}")
        out.append(Removal(what, count_by_epoch(epochs, epoch)))
    sink.head_store().update_head(
        lambda h: None if h.epoch <= epoch else Head(epoch, None, h.num_shards)
    )
    return out


def shard_commits(sink: SearchParts) -> dict[int, list[int]]:
    """Epoch -> shards of the shard-commit documents still held (those above the head)."""
    out: dict[int, list[int]] = {}
    start = 0
    while page := _page(sink, sink.control_index, _mine(sink, -2, "shard_commit"), start):
        for hit in page:
            out.setdefault(int(hit["_source"]["epoch"]), []).append(int(hit["_source"]["shard"]))
        start += len(page)
        if len(page) < PAGE:
            break
    return {e: sorted(s) for e, s in sorted(out.items())}
