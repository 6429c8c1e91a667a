"""The Elasticsearch stand-in: an HTTP server that answers like Elasticsearch 8.15 for the
parts the sink uses (:mod:`.server`, whose docstring lists what is reproduced), in memory or,
with a data directory, durable (:mod:`.journal`). No Elasticsearch server is installable on
the machines this project is tested on (ENVIRONMENT.md); this stands in for one.

``python -m exactlyonce.integration.lab.es_stand_in [--port N] [--data DIR]`` runs it as a
process of its own (the benchmarks, the soak and the local service ``es-stand-in`` do); the
tests start :class:`EsTestServer` in process.
"""

from __future__ import annotations

from exactlyonce.integration.lab.es_stand_in.server import EsTestServer, main, serve

__all__ = ["EsTestServer", "main", "serve"]
