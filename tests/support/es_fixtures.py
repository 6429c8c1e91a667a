"""The ``es`` fixture: a real Elasticsearch when ``ELASTICSEARCH_URL`` is set, else the test server.

``tests/conftest.py`` loads this module as a plugin (``pytest_plugins``): the fixtures need no
import.
Which backend ran is printed, recorded as a ``user_properties`` entry of every test that uses
it, and repeated in pytest's terminal summary, so a run says plainly whether it checked real
Elasticsearch or ``exactlyonce/integration/lab/es_stand_in/``.

No Elasticsearch server can be installed on the machines this project is tested on, so
unless ``ELASTICSEARCH_URL`` names a real cluster every Elasticsearch test runs against the
stand-in, ``exactlyonce/integration/lab/es_stand_in/``.

Write counts come from the test server's per-``_id`` write counters; against a real cluster
they come from ``_version`` (every successful index/create of an ``_id`` bumps it, a 409 does
not), which counts the same thing for documents that were never deleted. Refused writes (409s:
a ``create`` of an existing ``_id``) leave no trace in a real cluster; the stand-in counts them
per ``_id`` (:meth:`EsHandle.conflicts`). :func:`read_index` reads documents and ``_version``
over plain HTTP, with neither the sink's client nor elasticsearch-py.
"""

from __future__ import annotations

import json
import os
import random
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from elasticsearch import Elasticsearch, helpers

from exactlyonce.integration.lab.es_stand_in import EsTestServer

_RAN_AGAINST: set[str] = set()


@dataclass
class EsHandle:
    url: str
    server: EsTestServer | None

    @property
    def kind(self) -> str:
        return "test" if self.server is not None else "real"

    def describe(self) -> str:
        if self.server is not None:
            return (
                f"the in-process test server exactlyonce/integration/lab/es_stand_in/ at {self.url}"
            )
        return f"REAL Elasticsearch at {self.url} (ELASTICSEARCH_URL)"

    def client(self) -> Elasticsearch:
        return Elasticsearch(self.url, request_timeout=30)

    def require_server(self, why: str) -> EsTestServer:
        """The test server, for fault injection; a real cluster cannot be told to fail."""
        if self.server is None:
            pytest.skip(f"needs the test server's fault injection ({why}); ran against real ES")
        return self.server

    def writes(self, index: str) -> dict[str, int]:
        """Successful writes (index/create) per ``_id``: counters, or ``_version`` for real."""
        if self.server is not None:
            return self.server.write_counts(index)
        with self.client() as es:
            if not es.indices.exists(index=index):
                return {}
            es.indices.refresh(index=index)
            return {
                hit["_id"]: int(hit["_version"])
                for hit in helpers.scan(es, index=index, query={"version": True}, size=2000)
            }

    def conflicts(self, index: str) -> dict[str, int] | None:
        """409s per ``_id`` (writes refused, e.g. a re-sent ``create``): the stand-in's count;
        None against a real cluster, which keeps no record of a refused write."""
        return self.server.conflicts(index) if self.server is not None else None

    def docs(self, index: str) -> dict[str, dict[str, Any]]:
        if self.server is not None:
            return self.server.documents(index)
        with self.client() as es:
            if not es.indices.exists(index=index):
                return {}
            es.indices.refresh(index=index)
            return {hit["_id"]: hit["_source"] for hit in helpers.scan(es, index=index, size=2000)}


@dataclass
class EsServiceHandle(EsHandle):
    """The stand-in run as the local service ``es-stand-in`` of ``home`` (a process of its
    own, with its journal, which chaos's ``restart`` restarts): its write counters read over
    its test-only endpoint ``GET /_stand_in/writes/<index>``."""

    home: Path | None = None

    @property
    def kind(self) -> str:
        return "stand-in service"

    def describe(self) -> str:
        return f"the Elasticsearch stand-in as the local service es-stand-in at {self.url}"

    def writes(self, index: str) -> dict[str, int]:
        docs = self._report(index)["docs"]
        return {i: int(d["written"]) for i, d in docs.items() if d["written"]}

    def conflicts(self, index: str) -> dict[str, int] | None:
        docs = self._report(index)["docs"]
        return {i: int(d["conflicts"]) for i, d in docs.items() if d["conflicts"]}

    def _report(self, index: str) -> dict[str, Any]:
        with urllib.request.urlopen(f"{self.url}/_stand_in/writes/{index}", timeout=30) as resp:
            report: dict[str, Any] = json.loads(resp.read())
        return report


def read_index(url: str, index: str) -> dict[str, tuple[int, dict[str, Any]]]:
    """Every document of ``index`` as ``_id -> (_version, _source)``, read over plain HTTP
    (urllib: ``_refresh``, then one ``_search`` with ``version: true``); ``{}`` when the index
    does not exist. For test indices of at most 10,000 documents."""

    def call(path: str, body: dict[str, Any] | None = None) -> Any:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(
            f"{url}/{path}", data=data, method="POST", headers={"Content-Type": "application/json"}
        )
        with urllib.request.urlopen(request, timeout=30) as resp:
            return json.loads(resp.read())

    try:
        call(f"{index}/_refresh")
    except urllib.error.HTTPError as exc:
        if exc.code == 404:
            return {}
        raise
    found = call(f"{index}/_search", {"version": True, "size": 10_000, "query": {"match_all": {}}})
    hits = found["hits"]["hits"]
    assert found["hits"]["total"]["value"] == len(hits), "more documents than one page holds"
    return {hit["_id"]: (int(hit["_version"]), hit["_source"]) for hit in hits}


class _Summary:
    """A plugin registered at runtime: says which Elasticsearch the tests ran against."""

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        for line in sorted(_RAN_AGAINST):
            terminalreporter.write_line(f"Elasticsearch tests ran against {line}")


def ephemeral_ports_start() -> int:
    """The first port the kernel hands out as the local end of an outgoing connection."""
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768  # Linux's default


def stand_in_server() -> EsTestServer:
    """The test server, started on a free port below the ephemeral range. A refusal
    (``refuse_connections_for``) stops listening and binds the same port again later; a port
    of the ephemeral range may meanwhile be some outgoing connection's own, and the server
    could not come back ("Address already in use", once in a whole run)."""
    top = ephemeral_ports_start()
    for port in random.sample(range(max(1024, top - 10_000), top), 50):
        try:
            return EsTestServer(port=port).start()
        except OSError:
            continue  # taken: try another
    raise RuntimeError(f"no free port below {top} for the Elasticsearch test server")


@pytest.fixture(scope="session")
def es_backend(request: pytest.FixtureRequest) -> Iterator[EsHandle]:
    url = os.environ.get("ELASTICSEARCH_URL")
    if url:
        handle = EsHandle(url.rstrip("/"), None)
        try:
            with handle.client() as es:
                es.info()
        except Exception as exc:
            pytest.fail(f"ELASTICSEARCH_URL={url} does not answer: {exc}")
        server = None
    else:
        server = stand_in_server()
        handle = EsHandle(server.url, server)
    _RAN_AGAINST.add(handle.describe())
    if not request.config.pluginmanager.has_plugin("exactlyonce-es-summary"):
        request.config.pluginmanager.register(_Summary(), "exactlyonce-es-summary")
    print(f"\nElasticsearch tests run against {handle.describe()}")
    yield handle
    if server is not None:
        server.stop()


@pytest.fixture
def es(es_backend: EsHandle, record_property: Any) -> Iterator[EsHandle]:
    record_property("elasticsearch", es_backend.kind)
    yield es_backend
    if es_backend.server is not None:
        es_backend.server.reset_faults()
