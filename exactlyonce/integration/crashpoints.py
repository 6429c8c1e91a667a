"""Named crash points for kill -9 tests.

Inactive unless the environment variable ``EXACTLYONCE_CRASH_AT`` is set, so production code
pays one dict lookup per call. When set to ``POINT`` or ``POINT@EPOCH``, the process that
reaches that point writes a marker file into ``EXACTLYONCE_CRASH_DIR`` and then waits to be
SIGKILLed by the test (``EXACTLYONCE_CRASH_MODE=pause``, the default), or SIGKILLs itself
(``EXACTLYONCE_CRASH_MODE=self``). A point fires once per marker directory: after the restart
it does not fire again.

Points, in write-path order:

- ``before_write``: the driver, after the head check and before any task writes;
- ``mid_copy`` (PostgreSQL), ``mid_write`` (Redis), ``mid_bulk`` (Elasticsearch),
  ``mid_produce`` (Kafka): a task, after part of its data reached the sink, inside the open
  transaction where the sink has one;
- ``before_confirm`` (Kafka): a task, after its transaction committed and before the commit
  is confirmed on the control topic;
- ``after_shard_commit``: a task, after its shard transaction committed;
- ``after_head``: the driver, after the head advanced and before Spark writes its commit log.

"After Spark's commit" needs no hook: a test waits for ``<checkpoint>/commits/<epoch>``.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

POINTS = (
    "before_write",
    "mid_copy",
    "mid_write",
    "mid_bulk",
    "mid_produce",
    "before_confirm",
    "after_shard_commit",
    "after_head",
)
_ENV = "EXACTLYONCE_CRASH_AT"


def crash_point(name: str, epoch: int) -> None:
    spec = os.environ.get(_ENV)
    if not spec:
        return
    point, _, at_epoch = spec.partition("@")
    if point != name or (at_epoch and int(at_epoch) != epoch):
        return
    marker_dir = Path(os.environ.get("EXACTLYONCE_CRASH_DIR", "."))
    marker = marker_dir / f"crashed-{name}"
    try:
        fd = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except FileExistsError:
        return  # fired already; the restarted run goes on
    os.write(fd, f"{os.getpid()} {epoch}\n".encode())
    os.close(fd)
    if os.environ.get("EXACTLYONCE_CRASH_MODE", "pause") == "self":
        os.kill(os.getpid(), signal.SIGKILL)
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:  # the test SIGKILLs us here
        time.sleep(0.05)
