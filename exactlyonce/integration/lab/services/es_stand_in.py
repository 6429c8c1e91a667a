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

from exactlyonce.integration.lab.services.env import HOST, port, port_taken
from exactlyonce.integration.lab.services.processes import (
    adopt_running,
    read_pid,
    signal_and_wait,
    spawn_detached,
    tcp_open,
    wait_until,
)

NAME = "es-stand-in"
PROCESS_NAME = "exactlyonce.integration.lab.es_stand_in"  # in its command line
START_TIMEOUT_S = 60.0


def paths(home: Path) -> tuple[Path, Path, Path]:
    """(dir, pid file, log file)."""
    base = home / NAME
    return base, base / "es-stand-in.pid", base / "es-stand-in.log"


def pid(home: Path) -> int | None:
    """The pid from the pid file (it may be stale)."""
    return read_pid(paths(home)[1])


def url() -> str:
    return f"http://{HOST}:{port(NAME)}"


def answers() -> bool:
    """True once the server answers its cluster health."""
    try:
        with urllib.request.urlopen(f"{url()}/_cluster/health", timeout=2) as resp:
            return str(json.load(resp).get("status")) == "green"
    except (OSError, ValueError):
        return False


def start(home: Path) -> None:
    """Start the stand-in on its journal unless it runs, detached; return once it answers."""
    base, pidfile, log = paths(home)
    if adopt_running(NAME, pidfile, PROCESS_NAME, answers, log):
        return
    if tcp_open(port(NAME)):
        port_taken(NAME, home)
    base.mkdir(parents=True, exist_ok=True)
    argv = [sys.executable, "-m", PROCESS_NAME, "--host", HOST, "--port", str(port(NAME)),
            "--data", str(base / "data")]  # fmt: skip
    started = spawn_detached(argv, log, cwd=base)
    pidfile.write_text(f"{started}\n")
    wait_until(NAME, answers, log, timeout=START_TIMEOUT_S, pid=lambda: started)


def stop(home: Path) -> None:
    """Stop the stand-in with SIGTERM (SIGKILL after 15 s); its journal is kept."""
    _, pidfile, _ = paths(home)
    running = read_pid(pidfile)
    if running is not None:
        signal_and_wait(running, PROCESS_NAME)
    pidfile.unlink(missing_ok=True)
