"""Elasticsearch: our exactly-once sink against a plain ``helpers.streaming_bulk``, same docs.

``python -m bench.elasticsearch --rows 200000`` writes the same N generated rows two ways, in
one Spark session (``local[2]``), into one Elasticsearch: the cluster at ``$ELASTICSEARCH_URL``
when it is set (``"server": "real"`` in the results), else the HTTP test server
``lab/es_stand_in/``, started here as its own process on a free port (``"server": "test"``),
as the tests do. The paths (``eos``: ``ElasticsearchSink``; ``plain``: elasticsearch-py's
``helpers.streaming_bulk`` in ``mapInArrow``; ``server_raw``, test server only: pre-built
``_bulk`` bodies over 2 connections), the documents, the warm-up, the interleaved best-of
``--repeat`` runs and the count after each run are :mod:`bench.search`'s, shared with
``python -m bench opensearch``. For the test server, each run also records the server
process's CPU seconds (from ``/proc``): a server that is CPU-bound spends about one CPU second
per wall second (it is one Python process, held by its GIL).

Writes ``bench/results/elasticsearch.json`` with ``eos_docs_per_s``, ``plain_docs_per_s``,
``ratio`` (eos / plain), ``server`` (``real`` or ``test``), ``rows`` and the details.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from collections.abc import Sequence
from typing import Any

from bench import common, search
from bench.common import BenchError
from bench.search import Server


class Elasticsearch(search.Engine):
    """elasticsearch-py and :class:`~exactlyonce.connectors.elasticsearch.ElasticsearchSink`."""

    name = "elasticsearch"
    title = "Elasticsearch"
    prefix = "bench-es-"
    modules = ("elasticsearch", "elastic_transport")
    helpers = "elasticsearch.helpers"
    sink_class = ("exactlyonce.connectors.elasticsearch", "ElasticsearchSink")
    url_variable = "ELASTICSEARCH_URL"
    logger = "elastic_transport"

    def client(self, url: str) -> Any:
        from elasticsearch import Elasticsearch

        return Elasticsearch(url, request_timeout=300)

    def create_index(self, client: Any, name: str, mappings: dict[str, Any]) -> None:
        client.indices.create(index=name, mappings=mappings)

    def delete_index(self, client: Any, name: str) -> None:
        client.options(ignore_status=404).indices.delete(index=name)

    def delete_doc(self, client: Any, index: str, doc_id: str) -> None:
        client.options(ignore_status=404).delete(index=index, id=doc_id)


ENGINE = Elasticsearch()


def start_server() -> Server:
    """``$ELASTICSEARCH_URL`` (``real``), or the test server in its own process (``test``)."""
    given = search.given_server(ENGINE, "real", "real")
    if given is not None:
        return given
    proc = subprocess.Popen(
        [sys.executable, "-m", "exactlyonce.integration.lab.es_stand_in", "--port", "0"],
        cwd=common.PROJECT_ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        start_new_session=True,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline().strip()
    prefix = "es_server listening on "
    if not line.startswith(prefix):
        common.stop_process(proc)
        raise BenchError(f"the test server did not start (said {line!r})")
    return Server(
        ENGINE,
        line[len(prefix) :],
        "test",
        lambda s: f"the test server lab/es_stand_in/ (own process, pid {proc.pid})",
        pid=proc.pid,
        stop=lambda: common.stop_process(proc),
    )


def main(argv: Sequence[str] | argparse.Namespace | None = None) -> int:
    return search.main(argv, ENGINE, start_server, __doc__)


if __name__ == "__main__":
    sys.exit(main())
