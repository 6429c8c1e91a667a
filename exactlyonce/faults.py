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
- ``before_head`` (the Spark data source path): the driver's commit of an epoch, after every
  task succeeded and before the head advances;
- ``after_head``: the driver, after the head advanced and before Spark writes its commit log.

Spark Real-time Mode (:mod:`exactlyonce.connectors.base.realtime`; a task of the epoch):

- ``rtm_before_chunk``: a chunk taken from the pending rows, about to be committed (rows of
  the epoch are in the sink from earlier chunks, these are not);
- ``rtm_after_chunk``: a chunk and its frontiers committed, the epoch going on;
- ``rtm_epoch_end``: the epoch's last chunk committed at ``close``, before Spark commits the
  epoch (a re-run then finds every row below the frontier).

``exactlyonce rewind`` (the epoch is the one rewound to):

- ``rewind_after_catalog``: after the dedup catalog was dropped, before the sink's step;
- ``rewind_mid_delete`` (Redis): after one stream's entries above the epoch were deleted,
  before the others and the head;
- ``rewind_after_sink``: after the sink removed its records and moved its head back, before
  the Spark checkpoint;
- ``rewind_mid_checkpoint``: after the first of the checkpoint's batch files was deleted.

"After Spark's commit" needs no hook: a test waits for ``<checkpoint>/commits/<epoch>``.

A test can also HOLD a run at a point, to do something to a service at a known moment (restart
the sink's Redis while a task holds an open connection mid-write): with
``EXACTLYONCE_HOLD_AT=POINT@EPOCH``, the first process to reach it writes ``held-POINT`` into
``EXACTLYONCE_CRASH_DIR`` and waits until the test creates ``release-POINT`` there, then goes on.
Several holds, for one run to be held more than once, are separated by commas
(``after_shard_commit@2,mid_bulk@4``), each at a different point.
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
    "before_head",
    "after_head",
    "rtm_before_chunk",
    "rtm_after_chunk",
    "rtm_epoch_end",
    "rewind_after_catalog",
    "rewind_mid_delete",
    "rewind_after_sink",
    "rewind_mid_checkpoint",
)
_ENV = "EXACTLYONCE_CRASH_AT"
_HOLD_ENV = "EXACTLYONCE_HOLD_AT"


def crash_point(name: str, epoch: int) -> None:
    if _HOLD_ENV in os.environ:
        _hold(name, epoch)
    if not _matches(os.environ.get(_ENV), name, epoch) or not _first(f"crashed-{name}", epoch):
        return
    if os.environ.get("EXACTLYONCE_CRASH_MODE", "pause") == "self":
        os.kill(os.getpid(), signal.SIGKILL)
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:  # the test SIGKILLs us here
        time.sleep(0.05)


def armed(name: str) -> bool:
    """True when a crash or a hold is set for point ``name`` (at any epoch): a caller may
    then prepare the moment (flush what it wrote) before :func:`crash_point`."""
    return any(spec.partition("@")[0] == name for env in (_ENV, _HOLD_ENV) for spec in _specs(env))


def _specs(env: str) -> list[str]:
    """The ``POINT@EPOCH`` entries of ``env`` (comma-separated)."""
    return [spec for spec in (os.environ.get(env) or "").split(",") if spec]


def _matches(spec: str | None, name: str, epoch: int) -> bool:
    if not spec:
        return False
    point, _, at_epoch = spec.partition("@")
    return point == name and (not at_epoch or int(at_epoch) == epoch)


def _marker_dir() -> Path:
    return Path(os.environ.get("EXACTLYONCE_CRASH_DIR", "."))


def _first(marker_name: str, epoch: int) -> bool:
    """Create the marker; False when it exists (fired already: the restarted run goes on)."""
    try:
        fd = os.open(_marker_dir() / marker_name, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except FileExistsError:
        return False
    os.write(fd, f"{os.getpid()} {epoch}\n".encode())
    os.close(fd)
    return True


def _hold(name: str, epoch: int) -> None:
    """Wait for the test's release file (at most 600 s) when this is the point to hold at."""
    held = any(_matches(spec, name, epoch) for spec in _specs(_HOLD_ENV))
    if not held or not _first(f"held-{name}", epoch):
        return
    release = _marker_dir() / f"release-{name}"
    deadline = time.monotonic() + 600
    while not release.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
