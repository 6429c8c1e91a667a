"""The local genuine OpenSearch node (service ``opensearch``), under ``<home>/opensearch``.

There is no Elasticsearch server installable here (ENVIRONMENT.md), but OpenSearch's server
jars are on Maven Central: :data:`~exactlyonce.integration.jars.OPENSEARCH_NODE` resolves them
(and log4j-core) once, and ``OpenSearchNode.java`` beside this module (a ``Node`` with the
netty4 plugin on the class path) is compiled next to them (:func:`node_classpath`). The node
runs single-node on loopback: HTTP on port ``opensearch`` (19200), transport on
``opensearch-transport`` (19300), ``-Xmx512m``, data on disk in ``<home>/opensearch/data``
that survives ``stop``/``start`` and a SIGKILL (the translog is fsynced per request, OpenSearch's
default, so what it acknowledged is kept). Started on demand (``services up --only
opensearch``): chaos restarts it, hard and clean, as an OpenSearch sink's own server.

A clean ``stop`` is SIGTERM: the main class's shutdown hook closes the node.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import urllib.request
from pathlib import Path

from exactlyonce.integration.jars import OPENSEARCH_NODE, folder, require_java, resolve
from exactlyonce.integration.lab.services.env import HOST, port
from exactlyonce.integration.lab.services.processes import DetachedService, check, run
from exactlyonce.integration.locking import exclusive

PROCESS_NAME = "OpenSearchNode"
MAIN = Path(__file__).resolve().with_name("OpenSearchNode.java")
VERSION = "2.19.6"  # opensearch-node.xml's opensearch.version
HEAP = ("-Xms256m", "-Xmx512m")
START_TIMEOUT_S = 120.0
STOP_TIMEOUT_S = 60.0


def node_classpath() -> str:
    """The node's jars and its compiled main class as one class path: resolved with Maven
    and compiled with ``javac`` the first time (a folder named after the main class's
    content, built under a temporary name and renamed into place)."""
    jars = resolve(OPENSEARCH_NODE)
    lib = folder(OPENSEARCH_NODE)
    digest = hashlib.sha256(MAIN.read_bytes()).hexdigest()[:10]
    classes = lib.parent / f"{lib.name}-main-{digest}"
    if not classes.is_dir():
        with exclusive(lib.parent / ".lock"):
            if not classes.is_dir():
                _compile(jars, classes)
    return os.pathsep.join([str(classes), *(str(j) for j in jars)])


def _compile(jars: list[Path], classes: Path) -> None:
    javac = shutil.which("javac")
    if javac is None:
        raise RuntimeError("`javac` not found on PATH: install a JDK 17+ (openjdk-17-jdk)")
    staging = classes.with_name(f".{classes.name}.{os.getpid()}")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    cp = os.pathsep.join(str(j) for j in jars)
    result = run([javac, "-d", str(staging), "-cp", cp, str(MAIN)], timeout=300)
    check(result, f"compiling {MAIN.name}")
    staging.rename(classes)


def node_argv(classpath: str, home: Path, http_port: int, transport_port: int) -> list[str]:
    """The command of a node whose data lives under ``home`` (``until-signal``: SIGTERM
    closes it cleanly; without it, the end of its stdin does)."""
    java = require_java()
    return [java, *HEAP, "-cp", classpath, PROCESS_NAME, str(home), str(http_port),
            str(transport_port)]  # fmt: skip


def url() -> str:
    return f"http://{HOST}:{port('opensearch')}"


def answers() -> bool:
    """True once the node's cluster health is green or yellow."""
    try:
        with urllib.request.urlopen(f"{url()}/_cluster/health", timeout=2) as resp:
            return str(json.load(resp).get("status")) in ("green", "yellow")
    except (OSError, ValueError):
        return False


SERVICE = DetachedService(
    "opensearch",
    PROCESS_NAME,
    answers,
    ports=("opensearch", "opensearch-transport"),
    start_timeout=START_TIMEOUT_S,
    stop_timeout=STOP_TIMEOUT_S,
)
paths, pid, stop = SERVICE.paths, SERVICE.pid, SERVICE.stop


def _argv(base: Path) -> list[str]:
    argv = node_argv(node_classpath(), base, port("opensearch"), port("opensearch-transport"))
    return [*argv, "until-signal"]


def start(home: Path) -> None:
    """Start the node unless it runs, detached; return once it answers. Resolves its jars
    and compiles its main class the first time. (``stop``: SIGTERM, which its hook closes
    it on; SIGKILL after 60 s; data is kept.)"""
    SERVICE.start(home, _argv)
