"""Interpreter settings the drainer changes while it works, and gives back as it found them.

A drainer is one Python process doing three things at once: a reader thread sorting Kafka
records into columns (pure Python, it holds the GIL), writer threads talking to PostgreSQL
(mostly waiting, but every step of psycopg needs the GIL back), and Arrow/COPY work. Two
interpreter defaults cost it measurably here (2-core VM, 200,000 buffered rows):

- the cyclic garbage collector kept walking the ~20,000 messages a chunk holds, and every
  other object of the process (a Spark driver's, for a drainer thread): 0.77-1.19 s of read CPU
  with it on, 0.56-0.65 s paused (:func:`gc_paused`, around each chunk's read);
- the GIL switch interval (5 ms): a writer waiting for the GIL after each network round trip
  waited up to 5 ms each time while the reader held it; with 0.5 ms, best of 3 drains
  1.50 s -> 1.33 s (:func:`switch_interval`, around each drain call).

Both are process-wide, so both are reference-counted: nested and concurrent users (several
drainers in one process) share one change, and the last one out restores what was there
before the first. ``Drainer`` leaves the switch interval alone unless given
``switch_interval_s``: the drain command and DrainerPool members, processes that only drain,
pass ``DRAIN_PROCESS_SWITCH_INTERVAL_S``.
"""

from __future__ import annotations

import contextlib
import gc
import sys
import threading
from collections.abc import Iterator

_LOCK = threading.Lock()
_GC = {"depth": 0, "was_enabled": False}
_SWITCH: dict[str, float] = {"depth": 0, "before": 0.0}


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """The cyclic collector paused inside; switched back on after the last pause ends, if it
    was on before the first. Nothing the drainer reads forms cycles: reference counting
    frees it."""
    with _LOCK:
        if _GC["depth"] == 0:
            _GC["was_enabled"] = gc.isenabled()
            gc.disable()
        _GC["depth"] += 1
    try:
        yield
    finally:
        with _LOCK:
            _GC["depth"] -= 1
            if _GC["depth"] == 0 and _GC["was_enabled"]:
                gc.enable()


@contextlib.contextmanager
def switch_interval(seconds: float | None) -> Iterator[None]:
    """``sys.setswitchinterval(seconds)`` inside (None: unchanged); the value from before the
    first of overlapping uses comes back after the last."""
    if seconds is None:
        yield
        return
    with _LOCK:
        if _SWITCH["depth"] == 0:
            _SWITCH["before"] = sys.getswitchinterval()
            sys.setswitchinterval(seconds)
        _SWITCH["depth"] += 1
    try:
        yield
    finally:
        with _LOCK:
            _SWITCH["depth"] -= 1
            if _SWITCH["depth"] == 0:
                sys.setswitchinterval(_SWITCH["before"])
