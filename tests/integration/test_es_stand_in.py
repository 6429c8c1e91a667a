"""lab/es_stand_in/ (the Elasticsearch stand-in) checked against a genuine engine,
OpenSearch.

No Elasticsearch server can be installed here (ENVIRONMENT.md); OpenSearch 2.19.6, a fork of
Elasticsearch 7.10 that kept its document and bulk APIs, runs from Maven Central jars
(tests/support/opensearch_node.py). Each test sends the same raw HTTP requests to the stand-in
and to OpenSearch, requests the Elasticsearch sink makes
(exactlyonce/connectors/elasticsearch): index exists/create with the sink's own mappings,
realtime GET, ``_create``, writes guarded by ``if_seq_no``/``if_primary_term``, ``_bulk`` with
create/index/delete, ``_mget`` with ``_source=false``, ``_refresh``, ``_search``, ``_count``.
It then compares what the sink reads: status codes, per-item status and error type, ``result``,
``_version``, ``_seq_no``, ``_primary_term``, ``found``, ``_source``, ``count`` and hits.

Known and accepted differences, normalised before comparing (the stand-in follows
Elasticsearch 8, where OpenSearch kept Elasticsearch 7's form):

- a value that does not fit the mapping is ``document_parsing_exception`` in Elasticsearch
  8.8+ and ``mapper_parsing_exception`` in OpenSearch (and Elasticsearch 7);
- ``GET /`` names the product and version differently.

The official Python client refuses to talk to OpenSearch (product check), so this module
speaks HTTP through urllib3, already installed with the client.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import urllib3

from exactlyonce.connectors.search.schema import (
    CONTROL_MAPPING,
    DEAD_LETTER_MAPPING,
    target_mapping,
)
from exactlyonce.integration.lab.es_stand_in import EsTestServer
from tests.support.opensearch_node import OpenSearchNode

pytestmark = pytest.mark.integration

RENAMED = {"document_parsing_exception": "mapper_parsing_exception"}
NO_REFRESH = {"settings": {"index": {"refresh_interval": "-1"}}}  # no periodic refresh


@dataclass(frozen=True)
class Reply:
    status: int
    body: Any


class Http:
    """Raw HTTP to one server."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.pool = urllib3.PoolManager(retries=False, timeout=60)

    def __call__(self, method: str, path: str, body: Any = None) -> Reply:
        bulk = path.split("?")[0].endswith("_bulk")
        data: bytes | None = None
        if isinstance(body, list) and bulk:
            data = "".join(json.dumps(line) + "\n" for line in body).encode()
        elif isinstance(body, bytes):
            data = body
        elif body is not None:
            data = json.dumps(body).encode()
        kind = "application/x-ndjson" if bulk else "application/json"
        resp = self.pool.request(method, self.url + path, body=data, headers={"Content-Type": kind})
        text = resp.data
        return Reply(resp.status, json.loads(text) if text.strip() else None)


@pytest.fixture(scope="module")
def stand_in() -> Iterator[EsTestServer]:
    with EsTestServer() as server:
        yield server


Scenario = Callable[[Http, str], list[Any]]


@pytest.fixture
def compare(
    stand_in: EsTestServer, opensearch: OpenSearchNode, unique_name: str
) -> Callable[[Scenario], list[Any]]:
    """Run a scenario against both servers (same index names); assert equal views."""

    def run(scenario: Scenario) -> list[Any]:
        prefix = unique_name.replace("_", "-").lower()
        ours = scenario(Http(stand_in.url), prefix)
        theirs = scenario(Http(opensearch.url), prefix)
        differ = [
            f"step {step}: stand-in {a!r}\n    != OpenSearch {b!r}"
            for step, (a, b) in enumerate(zip(ours, theirs, strict=True))
            if a != b
        ]
        assert not differ, "\n".join(differ)
        return theirs

    return run


# -- what the sink reads of each answer ----------------------------------------------------


def error_type(error: Any) -> str | None:
    if not isinstance(error, dict):
        return None
    kind = str(error.get("type"))
    return RENAMED.get(kind, kind)


def status_and_error(r: Reply) -> tuple[int, str | None]:
    return r.status, error_type(r.body.get("error")) if isinstance(r.body, dict) else None


def write_view(r: Reply) -> tuple[Any, ...]:
    """An index/create/delete answer: status, result, version, seq_no, term, error type."""
    b = r.body or {}
    return (
        r.status,
        b.get("result"),
        b.get("_version"),
        b.get("_seq_no"),
        b.get("_primary_term"),
        error_type(b.get("error")),
    )


def doc_view(d: dict[str, Any]) -> tuple[Any, ...]:
    """A GET or ``_mget`` document: found, _source (or its absence), version, seq_no, term."""
    return (
        d.get("_id"),
        d.get("found"),
        d.get("_source", "<no _source>"),
        d.get("_version"),
        d.get("_seq_no"),
        d.get("_primary_term"),
        error_type(d.get("error")),
    )


def bulk_view(r: Reply) -> tuple[Any, ...]:
    if r.status != 200:
        return status_and_error(r)
    items = []
    for item in r.body["items"]:
        ((op, info),) = item.items()
        items.append(
            (
                op,
                info.get("_id"),
                info["status"],
                info.get("result"),
                info.get("_version"),
                info.get("_seq_no"),
                info.get("_primary_term"),
                error_type(info.get("error")),
            )
        )
    return (r.status, r.body["errors"], items)


def mapping_view(body: Any, index: str) -> Any:
    """An index's mappings, without OpenSearch's own ``print_format`` of date fields."""

    def strip(node: Any) -> Any:
        if isinstance(node, dict):
            return {k: strip(v) for k, v in node.items() if k != "print_format"}
        return node

    return strip(body[index]["mappings"])


def count_view(r: Reply) -> tuple[int, Any]:
    return r.status, (r.body or {}).get("count")


def hits_view(r: Reply) -> tuple[int, Any, Any]:
    if r.status != 200:
        return (*status_and_error(r), None)
    hits = r.body["hits"]
    found = sorted((h["_index"], h["_id"], json.dumps(h["_source"])) for h in hits["hits"])
    return r.status, hits["total"]["value"], found


# -- the checks --------------------------------------------------------------------------


def test_cluster_info_and_health(compare: Callable[[Scenario], list[Any]]) -> None:
    def scenario(http: Http, _: str) -> list[Any]:
        info = http("GET", "/")
        health = http("GET", "/_cluster/health")
        return [
            (info.status, sorted(k for k in info.body if k in ("cluster_name", "version"))),
            (info.body["version"]["number"] != "", "tagline" in info.body),
            (health.status, health.body["status"] in ("green", "yellow")),
        ]

    compare(scenario)


def test_index_exists_and_create_with_the_sinks_mappings(
    compare: Callable[[Scenario], list[Any]],
) -> None:
    target = target_mapping({"event_id": "keyword", "amount": "long"}, "_epoch")

    def scenario(http: Http, p: str) -> list[Any]:
        out: list[Any] = []
        for suffix, mappings in (("control", CONTROL_MAPPING), ("dlq", DEAD_LETTER_MAPPING)):
            name = f"{p}-{suffix}"
            out.append(http("HEAD", f"/{name}").status)
            created = http("PUT", f"/{name}", {"mappings": mappings})
            out.append((created.status, created.body))
            out.append(http("HEAD", f"/{name}").status)
            out.append(status_and_error(http("PUT", f"/{name}", {"mappings": mappings})))
            mapping = http("GET", f"/{name}/_mapping")
            out.append((mapping.status, mapping.body[name]["mappings"]))
        created = http("PUT", f"/{p}-target", {"mappings": target})
        out.append((created.status, http("GET", f"/{p}-target/_mapping").body))
        out.append(status_and_error(http("PUT", f"/{p}-Upper", {})))
        out.append(status_and_error(http("PUT", f"/{p}-x", {"mappings": {"properties": {}}})))
        out.append(status_and_error(http("PUT", f"/_{p}", {})))
        bad = {"mappings": {"properties": {"a": {"type": "no_such_type"}}}}
        out.append(status_and_error(http("PUT", f"/{p}-badtype", bad)))
        out.append(http("HEAD", f"/{p}-badtype").status)
        out.append(status_and_error(http("DELETE", f"/{p}-x")))
        out.append(status_and_error(http("DELETE", f"/{p}-x")))
        return out

    compare(scenario)


def test_head_document_create_get_and_guarded_writes(
    compare: Callable[[Scenario], list[Any]],
) -> None:
    """The sink's head: realtime GET, _create (409 when there), if_seq_no/if_primary_term."""

    def scenario(http: Http, p: str) -> list[Any]:
        idx = f"/{p}-control"
        head = {"kind": "head", "query_name": "q", "sink": "s", "epoch": 1, "num_shards": 2}
        out: list[Any] = [http("PUT", idx, {"mappings": CONTROL_MAPPING, **NO_REFRESH}).status]
        missing = http("GET", f"{idx}/_doc/q%7Cs?realtime=true")
        out.append((missing.status, doc_view(missing.body)))
        no_index = http("GET", f"/{p}-nothing/_doc/x")
        out.append(status_and_error(no_index))
        out.append(write_view(http("PUT", f"{idx}/_create/q%7Cs", head)))
        out.append(write_view(http("PUT", f"{idx}/_create/q%7Cs", head)))
        got = http("GET", f"{idx}/_doc/q%7Cs?realtime=true")
        out.append((got.status, doc_view(got.body)))
        seq, term = got.body["_seq_no"], got.body["_primary_term"]
        moved = {**head, "epoch": 2}
        guard = f"if_seq_no={seq}&if_primary_term={term}"
        out.append(write_view(http("PUT", f"{idx}/_doc/q%7Cs?{guard}", moved)))
        out.append(write_view(http("PUT", f"{idx}/_doc/q%7Cs?{guard}", moved)))  # stale now
        stale_term = f"if_seq_no={seq + 1}&if_primary_term={term + 1}"
        out.append(write_view(http("PUT", f"{idx}/_doc/q%7Cs?{stale_term}", moved)))
        out.append(write_view(http("PUT", f"{idx}/_doc/other?{guard}", moved)))
        out.append(write_view(http("PUT", f"{idx}/_doc/q%7Cs?if_seq_no={seq + 1}", moved)))
        out.append(write_view(http("PUT", f"{idx}/_doc/q%7Cs?op_type=create", moved)))
        out.append(write_view(http("PUT", f"{idx}/_doc/bad", {**head, "surprise": 1})))
        out.append(write_view(http("PUT", f"{idx}/_doc/bad", {**head, "epoch": "one"})))
        got = http("GET", f"{idx}/_doc/q%7Cs")
        out.append((got.status, doc_view(got.body)))
        out.append(count_view(http("GET", f"{idx}/_count")))  # nothing refreshed yet
        out.append(http("POST", f"{idx}/_refresh").status)
        out.append(count_view(http("GET", f"{idx}/_count")))
        out.append(write_view(http("DELETE", f"{idx}/_doc/q%7Cs")))
        out.append(write_view(http("DELETE", f"{idx}/_doc/q%7Cs")))
        out.append(write_view(http("PUT", f"{idx}/_create/q%7Cs", head)))  # version goes on
        out.append(write_view(http("DELETE", f"{idx}/_doc/never")))
        out.append(write_view(http("DELETE", f"{idx}/_doc/never")))
        out.append(write_view(http("PUT", f"{idx}/_create/never", head)))
        return out

    compare(scenario)


def test_bulk_items_statuses_and_errors(compare: Callable[[Scenario], list[Any]]) -> None:
    """Per-item 201/200/409/400/404, dynamic and strict mappings, auto-created indices."""
    mappings = {
        "properties": {
            "n": {"type": "long"},
            "i": {"type": "integer"},
            "k": {"type": "keyword"},
            "t": {"type": "text"},
            "d": {"type": "date"},
            "b": {"type": "boolean"},
            "f": {"type": "double"},
            "o": {"properties": {"x": {"type": "long"}}},
        }
    }

    def scenario(http: Http, p: str) -> list[Any]:
        t, s, auto = f"{p}-t", f"{p}-strict", f"{p}-auto"
        out: list[Any] = [http("PUT", f"/{t}", {"mappings": mappings, **NO_REFRESH}).status]
        out.append(http("PUT", f"/{s}", {"mappings": CONTROL_MAPPING, **NO_REFRESH}).status)

        def op(kind: str, index: str, doc_id: str, **meta: Any) -> dict[str, Any]:
            return {kind: {"_index": index, "_id": doc_id, **meta}}

        ops: list[Any] = [
            op("create", t, "a"), {"n": 1, "k": "x"},
            op("create", t, "a"), {"n": 2},
            op("index", t, "a"), {"n": 3},
            op("index", t, "b"), {"n": "twelve"},
            op("index", t, "c"), {"n": "12", "i": 7.9, "f": "1.5", "b": "true"},
            op("index", t, "d"), {"i": 2**31},
            op("index", t, "e"), {"n": True},
            op("index", t, "f"), {"b": "yes"},
            op("index", t, "g"), {"d": "2024-01-02T03:04:05Z", "t": 5, "k": 1.5},
            op("index", t, "h"), {"d": "yesterday"},
            op("index", t, "i"), {"o": 5},
            op("index", t, "j"), {"k": {"nested": 1}},
            op("index", t, "k"), {"o": {"x": 1, "y": "new"}, "extra": [1, 2]},
            op("index", t, "l"), {"n": None, "f": 2.5e300},
            op("create", s, "m"), {"kind": "shard", "epoch": 1},
            op("create", s, "n"), {"kind": "shard", "unknown": 1},
            op("delete", t, "zz"),
            op("delete", t, "c"),
            op("create", f"{p}-Bad", "q"), {"n": 1},
            op("create", auto, "r"), {"s": "text", "n": 1, "f": 1.5, "d": "2024-01-01"},
            op("index", t, "a", if_seq_no=2, if_primary_term=1), {"n": 4},
            op("index", t, "a", if_seq_no=0, if_primary_term=1), {"n": 5},
        ]  # fmt: skip
        out.append(bulk_view(http("POST", "/_bulk", ops)))
        out.append(bulk_view(http("POST", f"/{t}/_bulk", [{"create": {"_id": "s"}}, {"n": 9}])))
        deletes = [op("delete", s, "m"), op("delete", s, "gone")]
        out.append(bulk_view(http("POST", "/_bulk", deletes)))
        out.append(http("GET", f"/{t}/_mapping").body[t]["mappings"])
        out.append(http("GET", f"/{auto}/_mapping").body[auto]["mappings"])
        for doc_id in ("a", "c", "g", "k", "l", "s"):
            got = http("GET", f"/{t}/_doc/{doc_id}")
            out.append((got.status, doc_view(got.body)))
        return out

    compare(scenario)


def test_external_versions_as_the_upsert_mode_writes_them(
    compare: Callable[[Scenario], list[Any]],
) -> None:
    """``version`` with ``version_type`` ``external_gte``/``external`` on index and delete
    (ElasticsearchSink mode="upsert" writes epochs as external versions): 409 below the
    current version, tombstones that keep a deleted _id's version, a delete of nothing."""

    def scenario(http: Http, p: str) -> list[Any]:
        def op(kind: str, doc_id: str, version: int, vt: str = "external_gte") -> Any:
            return {kind: {"_index": p, "_id": doc_id, "version": version, "version_type": vt}}

        out: list[Any] = [http("PUT", f"/{p}", NO_REFRESH).status]
        ops: list[Any] = [
            op("index", "a", 3), {"n": 1},
            op("index", "a", 3), {"n": 2},
            op("index", "a", 2), {"n": 3},
            op("index", "a", 5), {"n": 4},
            op("index", "b", 0), {"n": 5},
            op("delete", "b", 4),
            op("index", "b", 3), {"n": 6},
            op("index", "b", 4), {"n": 7},
            op("delete", "c", 7),
            op("delete", "c", 6),
            op("index", "c", 6), {"n": 8},
            op("index", "d", 2, "external"), {"n": 9},
            op("index", "d", 2, "external"), {"n": 10},
            op("delete", "d", 2, "external"),
        ]  # fmt: skip
        out.append(bulk_view(http("POST", "/_bulk", ops)))
        out.append(write_view(http("PUT", f"/{p}/_doc/e?version=4&version_type=external_gte", {})))
        out.append(write_view(http("PUT", f"/{p}/_doc/e?version=1&version_type=external_gte", {})))
        out.append(write_view(http("DELETE", f"/{p}/_doc/e?version=4&version_type=external_gte")))
        invalid = [
            [{"index": {"_index": p, "_id": "x", "version_type": "external_gte"}}, {"n": 1}],
            [op("index", "x", -1), {"n": 1}],
            [op("create", "x", 1), {"n": 1}],
        ]
        out.extend(status_and_error(http("POST", "/_bulk", body)) for body in invalid)
        for doc_id in ("a", "b", "c", "d"):
            got = http("GET", f"/{p}/_doc/{doc_id}")
            out.append((got.status, doc_view(got.body)))
        return out

    compare(scenario)


def test_bulk_refused_as_a_whole(compare: Callable[[Scenario], list[Any]]) -> None:
    """Malformed or invalid requests are refused whole (400) and apply nothing."""

    def scenario(http: Http, p: str) -> list[Any]:
        ok = [{"create": {"_index": p, "_id": "ok"}}, {"n": 1}]
        half_guard = [{"index": {"_index": p, "_id": "1", "if_seq_no": 0}}, {"n": 1}]
        term_only = [{"index": {"_index": p, "_id": "1", "if_primary_term": 1}}, {"n": 1}]
        return [
            status_and_error(http("POST", "/_bulk", [*ok, {"index": {"_id": "1"}}, {"n": 1}])),
            status_and_error(http("POST", "/_bulk", [*ok, *half_guard])),
            status_and_error(http("POST", "/_bulk", [*ok, *term_only])),
            http("HEAD", f"/{p}").status,  # nothing applied, not even the index made
            status_and_error(http("POST", "/_bulk", b"")),
            status_and_error(http("POST", "/_bulk", [{"frob": {"_index": p}}, {}])),
            status_and_error(http("POST", "/_bulk", b"not json\n{}\n")),
            status_and_error(http("POST", "/_bulk", [{"index": {"_index": p}}])),
        ]

    compare(scenario)


def test_realtime_get_and_mget_versus_refreshed_search(
    compare: Callable[[Scenario], list[Any]],
) -> None:
    """Acknowledged writes are visible to GET/_mget at once, to _search/_count after refresh."""

    def scenario(http: Http, p: str) -> list[Any]:
        idx = f"{p}-rt"
        query = {"bool": {"filter": [{"term": {"query_name": "q"}}, {"term": {"sink": "s"}}]}}
        out: list[Any] = [
            http("PUT", f"/{idx}", {"mappings": CONTROL_MAPPING, **NO_REFRESH}).status
        ]
        docs = [
            ("q|s|1|0", {"kind": "shard", "query_name": "q", "sink": "s", "epoch": 1}),
            ("q|s|1|1", {"kind": "shard", "query_name": "q", "sink": "s", "epoch": 1}),
            ("other", {"kind": "shard", "query_name": "r", "sink": "s", "epoch": 1}),
        ]
        ops: list[Any] = []
        for doc_id, src in docs:
            ops += [{"create": {"_index": idx, "_id": doc_id}}, src]
        out.append(bulk_view(http("POST", "/_bulk", ops)))
        ids = ["q|s|1|0", "q|s|1|1", "q|s|1|2"]
        got = http("POST", f"/{idx}/_mget?realtime=true&_source=false", {"ids": ids})
        out.append((got.status, [doc_view(d) for d in got.body["docs"]]))
        got = http("POST", f"/{idx}/_mget", {"ids": ids[:1]})
        out.append((got.status, [doc_view(d) for d in got.body["docs"]]))
        missing = f"{p}-missing"
        got = http("POST", f"/{missing}/_mget?realtime=true&_source=false", {"ids": ids[:1]})
        out.append((got.status, [doc_view(d) for d in got.body["docs"]]))
        mixed = {"docs": [{"_index": idx, "_id": "other"}, {"_index": missing, "_id": "x"}]}
        got = http("POST", "/_mget", mixed)
        out.append((got.status, [doc_view(d) for d in got.body["docs"]]))
        out.append(status_and_error(http("POST", "/_mget", {"docs": [{"_id": "x"}]})))
        out.append(status_and_error(http("POST", f"/{idx}/_mget", {"ids": []})))
        got = http("GET", f"/{idx}/_doc/other?_source=false")
        out.append((got.status, doc_view(got.body)))
        body = {"query": query, "size": 10_000}
        out.append(hits_view(http("POST", f"/{idx}/_search", body)))
        out.append(count_view(http("POST", f"/{idx}/_count", {"query": query})))
        out.append(http("POST", f"/{idx}/_refresh").status)
        out.append(hits_view(http("POST", f"/{idx}/_search", body)))
        out.append(count_view(http("POST", f"/{idx}/_count", {"query": query})))
        out.append(count_view(http("GET", f"/{idx}/_count")))
        out.append(status_and_error(http("POST", f"/{missing}/_refresh")))
        out.append(status_and_error(http("POST", f"/{missing}/_search", body)))
        return out

    compare(scenario)


def test_refresh_parameters(compare: Callable[[Scenario], list[Any]]) -> None:
    """``refresh=true`` and ``_refresh`` make writes searchable, ``refresh=false`` does not;
    ``refresh=wait_for`` returns once they are (on an index that refreshes: with
    ``refresh_interval: -1`` it would wait for ever, in both)."""

    def scenario(http: Http, p: str) -> list[Any]:
        idx, timed = f"{p}-refresh", f"{p}-timed"
        out: list[Any] = [http("PUT", f"/{idx}", NO_REFRESH).status]
        first = [{"create": {"_index": idx, "_id": "1"}}, {"n": 1}]
        out.append(bulk_view(http("POST", "/_bulk?refresh=true", first)))
        out.append(count_view(http("GET", f"/{idx}/_count")))
        out.append(write_view(http("PUT", f"/{idx}/_doc/2?refresh=false", {"n": 2})))
        out.append(count_view(http("GET", f"/{idx}/_count")))
        out.append(http("POST", "/_refresh").status)
        out.append(count_view(http("GET", f"/{idx}/_count")))
        out.append(write_view(http("PUT", f"/{idx}/_doc/3?refresh=true", {"n": 3})))
        out.append(count_view(http("GET", f"/{idx}/_count")))
        out.append(http("PUT", f"/{timed}", {}).status)
        out.append(write_view(http("PUT", f"/{timed}/_doc/1?refresh=wait_for", {"n": 1})))
        out.append(count_view(http("GET", f"/{timed}/_count")))
        return out

    compare(scenario)


def test_values_spark_rows_bring(compare: Callable[[Scenario], list[Any]]) -> None:
    """Values as the client serialises Spark rows (ISO datetimes, dates, nulls, lists,
    structs, large and fractional numbers), into typed fields and through dynamic mapping."""
    typed = target_mapping(
        {"ts": "date", "day": "date", "amount": "long", "ratio": "double", "tag": "keyword"},
        "_epoch",
    )
    rows: list[dict[str, Any]] = [
        {"ts": "2024-01-02T03:04:05.123456", "day": "2024-01-02", "amount": 2**62},
        {"ts": "2024-01-02T03:04:05+00:00", "ratio": 1e-300, "tag": ["a", "b"]},
        {"ts": "2024-01-02 03:04:05"},
        {"ts": "2024/01/02"},
        {"ts": 1_700_000_000_000, "day": "1700000000000"},
        {"ts": "2024-13-45"},
        {"amount": 1.5, "ratio": "2.5"},
        {"amount": "1e3"},
        {"amount": [1, 2, None], "tag": None},
        {"tag": True, "ratio": -0.0},
        {"_id": "inside"},
        {"tag": ""},
        {"amount": -(2**63)},
        {"amount": 2**63},
    ]
    dynamic: list[dict[str, Any]] = [
        {"when": "2024-01-02T03:04:05.123456", "day": "2024-01-02"},
        {"spaced": "2024-01-02 03:04"},
        {"slash": "2024/01/02"},
        {"baddate": "2024-13-45"},
        {"count": 3, "frac": 0.1, "numtext": "12", "flag": False},
        {"big": 2**63 + 1},
        {"nested": {"a": 1, "b": {"c": "x"}}},
        {"list": [1.5, 2.5], "ints": [1, 2]},
        {"empty": [], "nothing": None},
        {"count": "3"},
        {"count": "three"},
    ]

    def scenario(http: Http, p: str) -> list[Any]:
        t, auto = f"{p}-typed", f"{p}-dyn"
        out: list[Any] = [http("PUT", f"/{t}", {"mappings": typed}).status]
        ops: list[Any] = []
        for i, row in enumerate(rows):
            ops += [{"index": {"_index": t, "_id": str(i)}}, row]
        for i, row in enumerate(dynamic):
            ops += [{"index": {"_index": auto, "_id": str(i)}}, row]
        out.append(bulk_view(http("POST", "/_bulk", ops)))
        out.append(mapping_view(http("GET", f"/{t}/_mapping").body, t))
        out.append(mapping_view(http("GET", f"/{auto}/_mapping").body, auto))
        slashed = [{"index": {"_index": auto, "_id": "s"}}, {"slash": "2024/02/03 04:05:06"}]
        out.append(bulk_view(http("POST", "/_bulk", slashed)))
        iso = [{"index": {"_index": auto, "_id": "i"}}, {"slash": "2024-02-03"}]
        out.append(bulk_view(http("POST", "/_bulk", iso)))
        return out

    compare(scenario)
