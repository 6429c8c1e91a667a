"""Where a sink's one line per batch goes when nobody configured logging.

Each batch's line is logged at INFO on the ``exactlyonce.batches`` logger (a child of
``exactlyonce``). A user of ``foreachBatch(sink)`` who configured no logging would see
nothing (Python's last-resort handler shows warnings only), so on a sink's first batch
:func:`show_batches_by_default` attaches one stderr handler to the ``exactlyonce`` logger, at
INFO, unless that logger or the root logger already has a handler (the ``exactlyonce`` CLI
adds its own, and so does ``logging.basicConfig``). :func:`quiet` turns the lines off.
"""

from __future__ import annotations

import logging

BATCH_LOGGER = "exactlyonce.batches"
PACKAGE_LOGGER = "exactlyonce"
LINE_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"

_state: dict[str, logging.Handler | bool | None] = {
    "handler": None,
    "quiet": False,
    "set_level": False,  # the package logger's level was set here (and is given back by quiet)
}


def show_batches_by_default() -> None:
    """Attach the default stderr handler once, unless logging is configured or :func:`quiet`
    was called. Cheap after the first call."""
    if _state["handler"] is not None or _state["quiet"]:
        return
    package = logging.getLogger(PACKAGE_LOGGER)
    if package.handlers or logging.getLogger().handlers:
        return
    handler = logging.StreamHandler()  # sys.stderr at the time of each line
    handler.setFormatter(logging.Formatter(LINE_FORMAT))
    package.addHandler(handler)
    if package.level == logging.NOTSET:
        package.setLevel(logging.INFO)
        _state["set_level"] = True
    _state["handler"] = handler


def quiet() -> None:
    """No per-batch line from now on: the default handler (if attached) is removed, and the
    ``exactlyonce.batches`` logger drops INFO, also under a logging set up by the user.
    Warnings and errors of the package still show."""
    _state["quiet"] = True
    logging.getLogger(BATCH_LOGGER).setLevel(logging.WARNING)
    handler = _state["handler"]
    if isinstance(handler, logging.Handler):
        package = logging.getLogger(PACKAGE_LOGGER)
        package.removeHandler(handler)
        if _state["set_level"]:
            package.setLevel(logging.NOTSET)
            _state["set_level"] = False
        _state["handler"] = None


def default_handler() -> logging.Handler | None:
    """The handler :func:`show_batches_by_default` attached, if any (for tests)."""
    handler = _state["handler"]
    return handler if isinstance(handler, logging.Handler) else None
