"""The Elasticsearch test server, checked with the official client over a real socket.

These run against lab/es_stand_in/ only (never a real cluster): they check the server that
stands in for Elasticsearch where none can be installed.
"""

from __future__ import annotations

import http.client
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from elasticsearch import (
    AuthenticationException,
    BadRequestError,
    ConflictError,
    ConnectionError,
    ConnectionTimeout,
    Elasticsearch,
    NotFoundError,
    helpers,
)

from exactlyonce.integration.lab.es_stand_in import EsTestServer

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def server() -> Iterator[EsTestServer]:
    with EsTestServer() as s:
        yield s


@pytest.fixture
def client(server: EsTestServer) -> Iterator[Elasticsearch]:
    with Elasticsearch(server.url, request_timeout=10) as es:
        yield es


def bulk(es: Elasticsearch, *ops: dict[str, object]) -> dict[str, object]:
    return dict(es.bulk(operations=list(ops)).body)


def test_answers_like_elasticsearch(server: EsTestServer, client: Elasticsearch) -> None:
    info = client.info()
    assert info["version"]["number"] == "8.15.0"
    assert info.meta.headers["X-Elastic-Product"] == "Elasticsearch"
    assert info.meta.headers["content-type"].endswith("compatible-with=9")
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=5)
    conn.request(
        "GET", "/", headers={"Accept": "application/vnd.elasticsearch+json; compatible-with=8"}
    )
    resp = conn.getresponse()
    assert resp.getheader("content-type") == "application/vnd.elasticsearch+json; compatible-with=8"
    assert resp.getheader("X-Elastic-Product") == "Elasticsearch"
    assert json.loads(resp.read())["tagline"] == "You Know, for Search"
    conn.close()


def test_indices_documents_and_versions(server: EsTestServer, client: Elasticsearch) -> None:
    assert not client.indices.exists(index="a")
    client.indices.create(index="a", mappings={"properties": {"n": {"type": "long"}}})
    assert client.indices.exists(index="a")
    with pytest.raises(BadRequestError, match="resource_already_exists_exception"):
        client.indices.create(index="a")
    with pytest.raises(NotFoundError, match="index_not_found_exception"):
        client.get(index="missing", id="1")
    assert client.index(index="a", id="1", document={"n": 1})["result"] == "created"
    assert client.index(index="a", id="1", document={"n": 2})["result"] == "updated"
    with pytest.raises(ConflictError, match="version_conflict_engine_exception"):
        client.create(index="a", id="1", document={"n": 3})
    with pytest.raises(ConflictError):
        client.index(index="a", id="1", document={"n": 4}, op_type="create")
    doc = client.get(index="a", id="1")
    assert (doc["_version"], doc["_source"], doc["found"]) == (2, {"n": 2}, True)
    with pytest.raises(ConflictError):
        client.index(index="a", id="1", document={"n": 5}, if_seq_no=0, if_primary_term=1)
    client.index(index="a", id="1", document={"n": 6}, if_seq_no=doc["_seq_no"], if_primary_term=1)
    assert server.write_counts("a") == {"1": 3}  # overwrites count: a unique _id hides them
    assert server.version("a", "1") == 3
    with pytest.raises(NotFoundError):
        client.get(index="a", id="nope")
    docs = client.mget(index="a", ids=["1", "nope"])["docs"]
    assert [d["found"] for d in docs] == [True, False]
    docs = client.mget(docs=[{"_index": "zz", "_id": "1"}])["docs"]
    assert docs[0]["error"]["type"] == "index_not_found_exception"


def test_bulk_statuses_and_mapping_errors(server: EsTestServer, client: Elasticsearch) -> None:
    client.indices.create(
        index="b",
        mappings={"properties": {"n": {"type": "long"}, "ok": {"type": "boolean"}}},
    )
    resp = bulk(
        client,
        {"create": {"_index": "b", "_id": "1"}},
        {"n": 1},
        {"create": {"_index": "b", "_id": "1"}},
        {"n": 1},
        {"index": {"_index": "b", "_id": "1"}},
        {"n": "7"},  # coerced, like Elasticsearch
        {"index": {"_index": "b", "_id": "2"}},
        {"n": "abc"},
        {"index": {"_index": "b", "_id": "3"}},
        {"ok": "maybe", "extra": "2024-01-02T03:04:05Z"},
        {"delete": {"_index": "b", "_id": "nope"}},
    )
    statuses = [next(iter(item.values()))["status"] for item in resp["items"]]  # type: ignore[attr-defined]
    assert statuses == [201, 409, 200, 400, 400, 404]
    assert resp["errors"] is True and isinstance(resp["took"], int)
    error = resp["items"][3]["index"]["error"]  # type: ignore[index]
    assert error["type"] == "document_parsing_exception"
    assert "failed to parse field [n] of type [long]" in error["reason"]
    assert server.write_counts("b") == {"1": 2}
    ok = bulk(client, {"index": {"_index": "b", "_id": "4"}}, {"n": 4, "when": "2024-01-02"})
    assert ok["errors"] is False
    mapping = client.indices.get_mapping(index="b")["b"]["mappings"]["properties"]
    assert mapping["when"] == {"type": "date"}


def test_search_sees_only_refreshed_documents(client: Elasticsearch) -> None:
    helpers.bulk(
        client, ({"_index": "c", "_id": str(i), "n": i, "k": f"k{i % 3}"} for i in range(10))
    )
    assert client.get(index="c", id="9")["found"]  # realtime GET sees every acknowledged write
    assert client.count(index="c")["count"] == 0  # search does not, until a refresh
    client.indices.refresh(index="c")
    assert client.count(index="c")["count"] == 10
    client.index(index="c", id="10", document={"n": 10, "k": "k1"}, refresh="wait_for")
    query = {
        "bool": {
            "filter": [{"term": {"k": "k1"}}, {"range": {"n": {"gte": 2}}}],
            "must_not": {"terms": {"n": [7]}},
        }
    }
    hits = client.search(index="c", query=query, sort=[{"n": "desc"}], size=2)["hits"]
    assert hits["total"]["value"] == 2 and [h["_id"] for h in hits["hits"]] == ["10", "4"]
    assert client.count(index="c", query={"match_all": {}})["count"] == 11


def test_faults(server: EsTestServer, client: Elasticsearch) -> None:
    server.reject_bulk_items(2)
    results = list(
        helpers.streaming_bulk(
            client,
            ({"_index": "d", "_id": str(i), "n": i} for i in range(5)),
            raise_on_error=False,
        )
    )
    assert [r[1]["index"]["status"] for r in results] == [429, 429, 201, 201, 201]
    assert results[0][1]["index"]["error"]["type"] == "es_rejected_execution_exception"
    server.drop_after_apply(1)
    with pytest.raises(ConnectionError):
        client.options(max_retries=0).bulk(operations=[{"create": {"_index": "d", "_id": "x"}}, {}])
    assert server.write_count("d", "x") == 1  # applied, though the reply was lost
    server.reject_for(0.3)
    assert bulk(client, {"index": {"_index": "d", "_id": "y"}}, {})["errors"] is True
    time.sleep(0.4)
    assert bulk(client, {"index": {"_index": "d", "_id": "y"}}, {})["errors"] is False
    assert server.attempts("d")["y"] == 2 and server.write_count("d", "y") == 1
    server.slow(0.5)
    with pytest.raises(ConnectionTimeout):
        client.options(request_timeout=0.1, max_retries=0).info()
    server.reset_faults()
    assert client.info()["version"]["number"]


def test_every_write_request_is_counted_per_id_conflicts_included(
    server: EsTestServer, client: Elasticsearch
) -> None:
    """A ``create`` of an existing ``_id`` writes nothing (409), and ``_version`` and the
    successful-write counter cannot show it; the write log counts it, over the bulk API and
    the document API, next to the rejections; the test-only endpoint reads the same log."""
    server.reject_bulk_items(1)
    bulk(
        client,
        {"create": {"_index": "w", "_id": "a"}}, {"n": 1},  # 429: rejected, never applied
        {"create": {"_index": "w", "_id": "a"}}, {"n": 1},
        {"create": {"_index": "w", "_id": "a"}}, {"n": 2},
        {"index": {"_index": "w", "_id": "b"}}, {"n": 1},
        {"index": {"_index": "w", "_id": "b"}}, {"n": 1},
        {"create": {"_index": "w", "_id": "c"}}, {"n": "not a number"},
    )  # fmt: skip
    with pytest.raises(ConflictError):
        client.create(index="w", id="a", document={"n": 3})
    assert server.write_counts("w") == {"a": 1, "b": 2}
    assert client.get(index="w", id="a")["_version"] == 1  # blind to the refused creates
    assert server.write_log("w") == {
        "a": {"create 429": 1, "create 201": 1, "create 409": 2},
        "b": {"index 201": 1, "index 200": 1},
        "c": {"create 400": 1},  # refused for its content (n is a long by now)
    }
    assert server.conflicts("w") == {"a": 2}
    assert server.attempts("w") == {"a": 4, "b": 2, "c": 1}
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=5)
    conn.request("GET", "/_stand_in/writes/w")
    resp = conn.getresponse()
    report = json.loads(resp.read())
    conn.close()
    assert resp.status == 200 and report == server.write_report("w")
    assert report["docs"]["a"] == {
        "written": 1,
        "conflicts": 2,
        "outcomes": {"create 429": 1, "create 201": 1, "create 409": 2},
    }
    assert report["totals"] == {"written": 3, "conflicts": 2, "ids": 3}


def test_basic_auth() -> None:
    with EsTestServer(basic_auth=("elastic", "right")) as server:
        with Elasticsearch(server.url, basic_auth=("elastic", "wrong")) as es:
            with pytest.raises(AuthenticationException) as err:
                es.info()
            assert err.value.body["error"]["type"] == "security_exception"
        with Elasticsearch(server.url, basic_auth=("elastic", "right")) as es:
            assert es.info()["version"]["number"] == "8.15.0"


def test_standalone_process() -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "exactlyonce.integration.lab.es_stand_in", "--port", "0"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.startswith("es_server listening on http://127.0.0.1:"), line
        with Elasticsearch(line.split()[-1]) as es:
            es.index(index="e", id="1", document={"n": 1})
            assert es.get(index="e", id="1")["_version"] == 1
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=10) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()


def test_external_versions_guard_index_and_delete(
    client: Elasticsearch, server: EsTestServer
) -> None:
    """What ElasticsearchSink(mode="upsert") relies on: ``external_gte`` writes apply at or
    above the current version (a tombstone's, after a delete) and 409 below it."""

    def op(kind: str, doc_id: str, version: int) -> dict[str, object]:
        return {
            kind: {"_index": "v", "_id": doc_id, "version": version, "version_type": "external_gte"}
        }

    reply = bulk(
        client,
        op("index", "a", 2), {"n": 1},
        op("index", "a", 2), {"n": 2},
        op("index", "a", 1), {"n": 3},
        op("delete", "a", 3),
        op("index", "a", 2), {"n": 4},
        op("delete", "never", 5),
        op("index", "never", 4), {"n": 5},
    )  # fmt: skip
    items: list[Any] = reply["items"]  # type: ignore[assignment]
    statuses = [next(iter(item.values()))["status"] for item in items]
    assert statuses == [201, 200, 409, 200, 409, 404, 409]
    assert server.write_count("v", "a") == 2 and server.version("v", "a") is None
    client.index(index="v", id="a", document={"n": 6}, version=3, version_type="external_gte")
    assert server.version("v", "a") == 3
    with pytest.raises(ConflictError):
        client.index(index="v", id="a", document={"n": 7}, version=3, version_type="external")
    with pytest.raises(BadRequestError):
        client.index(index="v", id="b", document={"n": 8}, version_type="external_gte")
