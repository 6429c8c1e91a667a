"""OpenSearch: our exactly-once sink against opensearch-py's ``helpers.streaming_bulk``, same docs.

``python -m bench opensearch --rows 200000`` writes the same N generated rows two ways, in one
Spark session (``local[2]``), into one genuine OpenSearch node: the one at ``$OPENSEARCH_URL``
when it is set, else an OpenSearch 2.19.6 node started here as its own JVM process, as the
tests start theirs (``tests/support/opensearch_node.py``: the server's jars from Maven Central,
cached, one single-node cluster on loopback, ``-Xmx512m``, data in a temporary directory,
closed and removed at the end). ``"server": "opensearch"`` in the results either way, with the
node's version. The paths (``eos``: ``OpenSearchSink``; ``plain``: opensearch-py's
``helpers.streaming_bulk`` in ``mapInArrow``; ``server_raw``, a node started here only:
pre-built ``_bulk`` bodies over 2 connections), the documents, the warm-up, the interleaved
best-of ``--repeat`` runs and the count after each run are :mod:`bench.search`'s, shared with
``python -m bench elasticsearch``. For a node started here, each run also records the JVM's
CPU seconds (from ``/proc``).

Writes ``bench/results/opensearch.json`` with ``eos_docs_per_s``, ``plain_docs_per_s``,
``ratio`` (eos / plain), ``server``, ``server_version``, ``rows`` and the details.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from collections.abc import Sequence
from typing import Any

from bench import search
from bench.common import BenchError, progress
from bench.search import Server


class OpenSearch(search.Engine):
    """opensearch-py and :class:`~exactlyonce.connectors.opensearch.OpenSearchSink`."""

    name = "opensearch"
    title = "OpenSearch"
    prefix = "bench-os-"
    modules = ("opensearchpy",)
    helpers = "opensearchpy.helpers"
    sink_class = ("exactlyonce.connectors.opensearch", "OpenSearchSink")
    url_variable = "OPENSEARCH_URL"
    logger = "opensearch"

    def client(self, url: str) -> Any:
        from opensearchpy import OpenSearch

        return OpenSearch(url, timeout=300)

    def create_index(self, client: Any, name: str, mappings: dict[str, Any]) -> None:
        client.indices.create(index=name, body={"mappings": mappings})

    def delete_index(self, client: Any, name: str) -> None:
        client.indices.delete(index=name, ignore=[404])

    def delete_doc(self, client: Any, index: str, doc_id: str) -> None:
        client.delete(index=index, id=doc_id, ignore=[404])


ENGINE = OpenSearch()


def start_server() -> Server:
    """``$OPENSEARCH_URL``, or a genuine node started here (tests/support/opensearch_node.py)."""
    given = search.given_server(ENGINE, "opensearch", "genuine")
    if given is not None:
        return given
    from exactlyonce.integration.lab.services.opensearch import HEAP
    from tests.support.opensearch_node import OpenSearchNode, OpenSearchUnavailable, resolve

    try:
        resolved = resolve()
        node = OpenSearchNode(resolved).start()
    except (OpenSearchUnavailable, subprocess.TimeoutExpired) as exc:
        raise BenchError(f"cannot start an OpenSearch node: {exc}") from None
    progress(f"OpenSearch node started in {node.start_seconds:.1f}s ({resolved.jars} jars)")
    pid = node.pid

    def describe(s: Server) -> str:
        return (
            f"genuine OpenSearch {s.version} node, single-node cluster started here "
            f"(tests/support/opensearch_node.py: the server's jars from Maven Central, "
            f"own JVM process pid {pid}, {' '.join(HEAP)})"
        )

    return Server(ENGINE, node.url, "opensearch", describe, pid=pid, stop=node.stop)


def main(argv: Sequence[str] | argparse.Namespace | None = None) -> int:
    return search.main(argv, ENGINE, start_server, __doc__)


if __name__ == "__main__":
    sys.exit(main())
