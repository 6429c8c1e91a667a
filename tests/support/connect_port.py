"""The machine's one local Spark Connect port.

A local Spark Connect server (``SparkSession.builder.remote("local[2]")``, and the one
``spark-pipelines run`` starts) listens on 15002, and its client finds it there: the port is
fixed outside Spark's own test mode. Tests that start one take this lock (a file lock, so
pytest-xdist workers and other checkouts' runs on the machine wait their turn) and wait for
the port to be free.
"""

from __future__ import annotations

import fcntl
import socket
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

PORT = 15002
LOCK = Path(tempfile.gettempdir()) / f"exactlyonce-spark-connect-{PORT}.lock"


@contextmanager
def local_connect_server(timeout: float = 900) -> Iterator[None]:
    """Hold the local Spark Connect port for the block (waiting up to ``timeout`` s)."""
    with LOCK.open("w") as lock:
        deadline = time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                assert time.monotonic() < deadline, f"port {PORT}: another test held it"
                time.sleep(0.5)
        try:
            wait_until_free(deadline)
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def wait_until_free(deadline: float) -> None:
    """Wait until nothing listens on the port (a killed server's socket is gone)."""
    while listening():
        assert time.monotonic() < deadline, f"port {PORT} stays taken by another process"
        time.sleep(0.2)


def listening() -> bool:
    with socket.socket() as s:
        s.settimeout(1)
        return s.connect_ex(("127.0.0.1", PORT)) == 0
