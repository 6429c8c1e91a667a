"""One file lock: serialize work between processes that share a folder."""

from __future__ import annotations

import contextlib
import fcntl
from collections.abc import Iterator
from pathlib import Path


@contextlib.contextmanager
def exclusive(lockfile: Path) -> Iterator[None]:
    """Hold an exclusive ``flock`` on ``lockfile`` (created, with its folder, if missing)
    for the ``with`` block; other processes asking for it wait."""
    lockfile.parent.mkdir(parents=True, exist_ok=True)
    with lockfile.open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
