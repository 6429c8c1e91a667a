"""The sinks by name: one :class:`~exactlyonce.connectors.base.kind.SinkKind` per sink.

Each built-in sink package exports its kind as ``KIND`` in its ``kind`` module; this module
only lists the packages. Code outside a sink's own package never names a concrete sink
class: it asks here (:func:`kind_named` for a name from config, :func:`kind_of` for a sink
or a config object). A sink of your own joins with :func:`register` and then works with
pipeline files, the audit and (if it has a drain target) the buffer, with no other edit.
"""

from __future__ import annotations

import functools
import importlib
from importlib.metadata import entry_points
from typing import Any

from exactlyonce.connectors.base.kind import SinkKind
from exactlyonce.errors import ConfigError

BUILT_IN = ("postgres", "kafka", "elasticsearch", "opensearch", "redis")
ENTRY_POINTS = "exactlyonce.sinks"

_registered: dict[str, SinkKind] = {}


def register(kind: SinkKind) -> SinkKind:
    """Make ``kind`` known by its name (again: the newer one wins). Returns it."""
    _registered[kind.name] = kind
    return kind


def unregister(name: str) -> None:
    """Forget a registered sink (built-in sinks come back on the next lookup)."""
    _registered.pop(name, None)


def _built_in(name: str) -> SinkKind:
    kind: SinkKind = importlib.import_module(f"exactlyonce.connectors.{name}.kind").KIND
    return kind


@functools.cache
def _installed() -> dict[str, SinkKind]:
    """The sinks installed distributions name in :data:`ENTRY_POINTS` (a built-in name is
    not taken over that way: :func:`register` it explicitly)."""
    found: dict[str, SinkKind] = {}
    for point in entry_points(group=ENTRY_POINTS):
        if point.name in BUILT_IN:
            continue
        kind = point.load()
        if not isinstance(kind, SinkKind) or kind.name != point.name:
            raise ConfigError(
                "sink",
                f"entry point {point.name} = {point.value} ({ENTRY_POINTS}) is not the "
                f"SinkKind named {point.name!r}",
            )
        found[point.name] = kind
    return found


def kinds() -> list[SinkKind]:
    """Every known sink: the built-in ones first, in :data:`BUILT_IN` order, then the
    installed ones, then those registered here."""
    known = {name: _registered.get(name) or _built_in(name) for name in BUILT_IN}
    known.update(_installed())
    known.update(_registered)
    return list(known.values())


def names() -> list[str]:
    return [kind.name for kind in kinds()]


def kind_named(name: str, field: str = "type") -> SinkKind:
    """The sink called ``name``; ConfigError on ``field`` naming the known ones if none."""
    kind = _registered.get(name)
    if kind is None and name in BUILT_IN:
        kind = _built_in(name)
    if kind is None:
        kind = _installed().get(name)
    if kind is None:
        raise ConfigError(field, f"unknown sink {name!r}; known: {', '.join(names())}")
    return kind


def kind_of_class(sink_class: type) -> SinkKind:
    """The kind whose sink class is ``sink_class`` (or a base of it)."""
    for kind in kinds():
        if issubclass(sink_class, kind.sink_class()):
            return kind
    raise ConfigError("type", f"{sink_class.__name__} is no registered sink's class")


def kind_of(thing: Any) -> SinkKind:
    """The kind of a sink object or of a sink's config model (its ``type``)."""
    config = getattr(thing, "config", thing)
    return kind_named(str(getattr(config, "type", type(thing).__name__)))


__all__ = [
    "BUILT_IN",
    "ENTRY_POINTS",
    "SinkKind",
    "kind_named",
    "kind_of",
    "kinds",
    "names",
    "register",
]
