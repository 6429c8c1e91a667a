"""Who hears of each batch: a process-wide registry of report listeners.

Every sink calls :func:`publish` with the :class:`~.report.BatchReport` of each call, in the
driver, after the batch's head moved (or after it was skipped). Layers above the sinks (the
metrics of :mod:`exactlyonce.integration.metrics`, a user's own hook) subscribe with
:func:`add_report_listener`; the sinks never import them.

A listener runs in the thread that ran the batch, so it must be quick. What it raises is
logged and dropped: observing a batch never fails it (its data is already committed).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from exactlyonce.connectors.base.report import BatchReport

ReportListener = Callable[[BatchReport], None]

log = logging.getLogger("exactlyonce")
_lock = threading.Lock()
_listeners: tuple[ReportListener, ...] = ()


def add_report_listener(listener: ReportListener) -> None:
    """Call ``listener(report)`` after every batch of every sink in this process (once, however
    often it is added)."""
    global _listeners
    with _lock:
        if listener not in _listeners:
            _listeners = (*_listeners, listener)


def remove_report_listener(listener: ReportListener) -> None:
    """Stop calling ``listener``; a listener never added is ignored."""
    global _listeners
    with _lock:
        _listeners = tuple(x for x in _listeners if x != listener)


def publish(report: BatchReport) -> None:
    """Hand ``report`` to every listener; a listener's error is logged, never raised."""
    for listener in _listeners:
        try:
            listener(report)
        except Exception as exc:
            log.warning(
                "report listener %r failed on epoch %d: %s: %s",
                listener,
                report.epoch,
                type(exc).__name__,
                exc,
            )
