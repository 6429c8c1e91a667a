"""The plain client of each kind of target, by name: :func:`client` returns the module
(:mod:`.postgres`, :mod:`.redis`, :mod:`.kafka`, :mod:`.elasticsearch`) with ``READER``,
``read``, ``last_epoch``, ``Watch``, ``prepare`` and ``write_partition``; imported on use, so
a run of the control imports only its own sink's client."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any, Protocol

from exactlyonce.integration.lab.chaos.control.target import KINDS, Target


class Watch(Protocol):
    """A watch on a target, armed when made: :meth:`seen` is True once a write committed
    after that became visible."""

    def seen(self, timeout: float, alive: Callable[[], bool]) -> bool: ...

    def close(self) -> None: ...


def client(kind: str) -> Any:
    if kind not in KINDS:
        raise ValueError(f"no plain client for {kind!r}")
    return importlib.import_module(f"exactlyonce.integration.lab.chaos.control.{kind}")


def control_commit_request(protocol: str) -> bytes:
    """The request after which the negative control's plain writer has written (its reply
    is the one a ``lost_reply`` fault drops): the client's ``COMMIT_REQUEST``."""
    request: bytes | None = client(protocol).COMMIT_REQUEST
    if request is None:
        raise ValueError(f"the {protocol} control writes through no proxy")
    return request


def watch(t: Target) -> Watch:
    made: Watch = client(t.kind).Watch(t)
    return made


def last_epoch(t: Target) -> int | None:
    found: int | None = client(t.kind).last_epoch(t)
    return found
