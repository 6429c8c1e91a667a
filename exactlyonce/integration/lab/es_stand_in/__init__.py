"""The Elasticsearch stand-in: an in-memory HTTP server that answers like Elasticsearch 8.15
for the parts the sink uses (:mod:`.server`, whose docstring lists what is reproduced).

``python -m tests.support.es_server [--port N]`` runs it as a process of its own (the
benchmarks and the soak do); the tests start :class:`EsTestServer` in process.
"""

from __future__ import annotations

from tests.support.es_server.server import EsTestServer, main, serve

__all__ = ["EsTestServer", "main", "serve"]
