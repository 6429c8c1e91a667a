"""The local Elasticsearch stand-in (service ``es-stand-in``), under ``<home>/es-stand-in``.

No Elasticsearch server is installable on the machines this project is tested on
(ENVIRONMENT.md): this service runs the lab's stand-in (:mod:`exactlyonce.integration.lab.
es_stand_in`) as a process of its own on port ``es-stand-in`` (19201), with its journal in
``<home>/es-stand-in/data``: every acknowledged write is fsynced before the reply and loaded
again at start, so a SIGKILL loses nothing it acknowledged, as the translog of a genuine
Elasticsearch (``durability: request``) promises. Started on demand (``services up --only
es-stand-in``): chaos restarts it, hard and clean, as an Elasticsearch sink's own server.
What it reproduces of Elasticsearch, and what not, is listed in the stand-in's docstring.

A clean ``stop`` is SIGTERM (the server stops listening and exits).
"""

from __future__ import annotations

import json
import sys
import urllib.request
from pathlib import Path

from exactlyonce.integration.lab.services.env import HOST, port
from exactlyonce.integration.lab.services.processes import DetachedService

NAME = "es-stand-in"
PROCESS_NAME = "exactlyonce.integration.lab.es_stand_in"  # in its command line
START_TIMEOUT_S = 60.0


def url() -> str:
    return f"http://{HOST}:{port(NAME)}"


def answers() -> bool:
    """True once the server answers its cluster health."""
    try:
        with urllib.request.urlopen(f"{url()}/_cluster/health", timeout=2) as resp:
            return str(json.load(resp).get("status")) == "green"
    except (OSError, ValueError):
        return False


SERVICE = DetachedService(NAME, PROCESS_NAME, answers, start_timeout=START_TIMEOUT_S)
paths, pid, stop = SERVICE.paths, SERVICE.pid, SERVICE.stop


def _argv(base: Path) -> list[str]:
    return [sys.executable, "-m", PROCESS_NAME, "--host", HOST, "--port", str(port(NAME)),
            "--data", str(base / "data")]  # fmt: skip


def start(home: Path) -> None:
    """Start the stand-in on its journal unless it runs, detached; return once it answers.
    (``stop``: SIGTERM, SIGKILL after 15 s; the journal is kept.)"""
    SERVICE.start(home, _argv)
