"""A sink's one entry in the registry: :class:`SinkKind`.

Every place that needs "the Redis one" (the pipeline file's ``type:``, the drainer's target,
the audit's reader, the data source path's shaping, the chaos runner's servers) asks the
registry (:mod:`exactlyonce.connectors.registry`) for the sink's kind instead of testing
types. A kind names its parts by ``"module:attribute"`` and imports them on first use, as
fsspec's registry does: asking for PostgreSQL's drain target never imports the Kafka,
Redis or Elasticsearch clients, and a Spark task never imports the registry at all.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from urllib.parse import SplitResult

    from exactlyonce.connectors.base.audit import SinkAudit
    from exactlyonce.connectors.base.config import SinkConfig
    from exactlyonce.connectors.base.expected import Expected
    from exactlyonce.connectors.base.shape import DataSourceTraits
    from exactlyonce.connectors.base.sink import ExactlyOnceSink

AuditReader = Callable[[Any, "Expected"], "SinkAudit"]


def load(reference: str) -> Any:
    """The object ``"package.module:attribute"`` names, its module imported now."""
    module, _, attribute = reference.partition(":")
    return getattr(importlib.import_module(module), attribute)


def _always(config: Any) -> str | None:
    return None


@dataclass(frozen=True)
class ChaosTraits:
    """What the chaos runner needs to know of a sink and its servers.

    ``addresses(config)``: the sink's server addresses as the config gives them (a DSN, a
    URL, ``host:port``), credentials included: only for finding and restarting local
    services, never printed. ``default_port``: the port of an address without one.
    ``proxy_refusal(config)``: why a fault proxy cannot stand in front of the sink (None: it
    can). ``address_field``: the config field holding that address (a list for ``hosts``),
    which chaos points at its fault proxy. ``commit_request``: the bytes of the request
    after which the sink's write is applied (the reply a ``lost_reply`` fault drops).
    ``mid_point``/``committed_point``: the sink's named crash points half-way through a
    task's write and just after it committed (:mod:`exactlyonce.faults`). ``protocol``: the
    wire protocol a plain client speaks to the sink's server (``postgres``, ``redis``,
    ``kafka``, ``elasticsearch`` for the whole Elasticsearch family): the independent
    readers and the negative control are chosen by it."""

    default_port: int
    addresses: Callable[[Any], list[str]]
    protocol: str = ""
    address_field: str | None = None
    commit_request: bytes | None = None
    mid_point: str | None = None
    committed_point: str = "after_shard_commit"
    proxy_refusal: Callable[[Any], str | None] = _always

    def write_points(self) -> tuple[str, ...]:
        """The named points a run of the sink passes, in order (rewind's are not among
        them): before the tasks, inside one, after its commit, after the head."""
        inner = (self.mid_point,) if self.mid_point else ()
        return ("before_write", *inner, self.committed_point, "after_head")


@dataclass(frozen=True)
class UrlTraits:
    """How a sink URL (``exactlyonce heads postgres://...``) names this sink.

    ``schemes``: the URL schemes (the first is the sink's name). ``given``: the settings the
    URL itself gives (never in its query string). ``client_options``: unknown query-string
    settings are the client's own and stay in the URL (else refused). ``settings(parts,
    rest)``: the settings the URL gives, from its parts and the client's query string
    ``rest``; raise ConfigError on field ``"sink URL"`` for a URL the sink cannot take.
    ``needs_host``: a URL with neither host nor path is refused."""

    schemes: tuple[str, ...]
    given: tuple[str, ...]
    settings: Callable[[SplitResult, str], dict[str, Any]]
    client_options: bool = False
    needs_host: bool = True  # False: a URL without a host means the client's default


@dataclass(frozen=True)
class SinkKind:
    """One sink: its name, its config model, and where each of its parts lives.

    ``name`` is what ``format("exactlyonce")``'s ``sink`` option, a pipeline file's
    ``type:`` and a sink URL's scheme say. ``sink``, ``audit``, ``datasource`` and ``drain``
    are ``"module:attribute"`` references (see :func:`load`):

    - ``sink``: the :class:`~exactlyonce.connectors.base.ExactlyOnceSink` subclass;
    - ``audit``: ``read(sink, expected) -> SinkAudit``, the audit reader: what the
      destination holds per record ID, read with the destination's own client in the mode
      where a second write shows;
    - ``datasource``: the sink's :class:`~exactlyonce.connectors.base.shape.DataSourceTraits`
      on the ``format("exactlyonce")`` path;
    - ``drain``: the buffer's drain target class, or None when no buffer drains into it.
    """

    name: str
    config: type[SinkConfig]
    sink: str
    audit: str
    datasource: str
    chaos: ChaosTraits
    url: UrlTraits
    drain: str | None = None

    def sink_class(self) -> type[ExactlyOnceSink]:
        cls: type[ExactlyOnceSink] = load(self.sink)
        return cls

    def audit_reader(self) -> AuditReader:
        reader: AuditReader = load(self.audit)
        return reader

    def datasource_traits(self) -> DataSourceTraits:
        traits: DataSourceTraits = load(self.datasource)
        return traits

    def drain_target(self) -> Any | None:
        """The drain target class (``check``, ``guarantee``, ``offsets_stored`` and the
        constructor :func:`exactlyonce.buffer.drain.targets.target_for` calls), or None."""
        return None if self.drain is None else load(self.drain)
