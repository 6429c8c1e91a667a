"""The in-memory sink's registry entry: a sink of one's own, joined with no edit outside
this package. ``registry.register(KIND)`` joins it in this process; an installed
distribution's ``exactlyonce.sinks`` entry point (``memory = "exactlyonce.testing.kind:KIND"``)
joins it in every process, ``exactlyonce run`` and the drainer included, as it would a sink
package of your own."""

from __future__ import annotations

from typing import Any
from urllib.parse import SplitResult

from exactlyonce.connectors.base.kind import ChaosTraits, SinkKind, UrlTraits
from exactlyonce.connectors.base.shape import DataSourceTraits
from exactlyonce.testing.sink import MemorySinkConfig

# The data source path: the user's columns, then the record ID and the epoch.
DATASOURCE = DataSourceTraits()


def _no_servers(config: Any) -> list[str]:
    return []


def _from_url(parts: SplitResult, rest: str) -> dict[str, str]:
    """``memory:///path/to/store``: the store's file."""
    return {"path": parts.path}


KIND = SinkKind(
    name="memory",
    config=MemorySinkConfig,
    sink="exactlyonce.testing.sink:MemorySink",
    audit="exactlyonce.testing.audit:read_memory",
    datasource="exactlyonce.testing.kind:DATASOURCE",
    drain="exactlyonce.testing.drain:MemoryDrainTarget",
    chaos=ChaosTraits(default_port=0, addresses=_no_servers),
    url=UrlTraits(("memory",), ("path",), _from_url, needs_host=False),
)

__all__ = ["DATASOURCE", "KIND"]
