"""Where a chaos run's records go, as plain clients see it: a :class:`Target` (a table, a
stream, a topic or an index on one server), for our sink and for the negative control alike.

A target is what the independent readers (:mod:`.reading`), the commit watchers (the kills
aimed at the window between a sink commit and Spark's commit log) and the control writer
(:mod:`.writer`) are given: the server's address, the name, the key columns records are
counted by and the field, column or header holding each record's epoch. It is built from the
pipeline file's sink settings and names nothing of our protocol beyond where the records are.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from exactlyonce.connectors import registry
from exactlyonce.errors import ConfigError
from exactlyonce.integration.config import PipelineConfig

Key = tuple[str, ...]  # a record's key values, as text
KAFKA_EPOCH_HEADER = "eo-epoch"  # our Kafka sink's and buffer's epoch header
CONTROL_EPOCH = "epoch"  # the control's epoch column, field or header
KINDS = ("postgres", "redis", "kafka", "elasticsearch")  # the plain clients' protocols


@dataclass(frozen=True)
class Target:
    """One destination: ``kind`` (of :data:`KINDS`), the server's ``address`` (a DSN, a URL,
    bootstrap servers, an HTTP URL; credentials included: never printed), ``name`` (table,
    stream key, topic, index), the ``keys`` records are counted by, the ``epoch`` column,
    field or header, and client ``options`` (Kafka security settings, Elasticsearch
    credentials). Picklable: the control writer's tasks take it to the executors."""

    kind: str
    address: str = field(repr=False)
    name: str
    keys: tuple[str, ...]
    epoch: str
    options: tuple[tuple[str, str], ...] = field(default=(), repr=False)
    points: tuple[str, str] = ("", "")  # the sink's mid-write and after-commit crash points
    server: str = ""  # the sink's name when it is not the protocol's (opensearch)

    def describe(self) -> str:
        what = {"postgres": "table", "redis": "stream", "kafka": "topic"}
        return f"{self.server or self.kind} {what.get(self.kind, 'index')} {self.name}"

    def option(self, name: str) -> str | None:
        return dict(self.options).get(name)


def protocol_of(sink: Any) -> str:
    """The wire protocol of a sink's server (its registry entry's ``chaos.protocol``): the
    Elasticsearch family shares one plain client."""
    return registry.kind_of(sink).chaos.protocol


def sink_settings(cfg: PipelineConfig) -> Any:
    """The sink's own settings (a buffered sink's without its buffer)."""
    entry = cfg.sink
    own = getattr(entry, "sink_config", None)
    return own() if own is not None and getattr(entry, "buffer", None) is not None else entry


def key_columns(cfg: PipelineConfig) -> tuple[str, ...]:
    keys = tuple(cfg.sink.id_columns or ())
    if not keys:
        raise ConfigError(
            "sink.id_columns",
            "the independent audit and the negative control count records by their key: "
            "name id_columns",
        )
    return keys


def write_mode(cfg: PipelineConfig) -> str:
    """The mode the sink runs: ``append``/``insert``/``upsert`` (PostgreSQL), the Redis
    ``write`` (``stream``...), the Elasticsearch ``op_type`` (or ``upsert``), ``transactions``
    for Kafka; ``buffered-`` in front for a buffered sink."""
    sink = sink_settings(cfg)
    protocol = protocol_of(sink)
    if protocol == "redis":
        mode = str(sink.write)
    elif protocol == "elasticsearch":
        mode = "upsert" if sink.mode == "upsert" else str(sink.op_type)
    elif protocol == "kafka":
        mode = "transactions"
    else:
        mode = str(sink.mode)
    return f"buffered-{mode}" if getattr(cfg.sink, "buffer", None) is not None else mode


def ours(cfg: PipelineConfig) -> tuple[Target, Target]:
    """Our sink's targets: where a run's commits show (the buffer topic of a buffered sink,
    else the sink), and where the records end (the sink)."""
    final = _sink_target(cfg, None)
    buffer = getattr(cfg.sink, "buffer", None)
    if buffer is None:
        return final, final
    written = Target(
        "kafka",
        buffer.bootstrap_servers,
        buffer.topic,
        key_columns(cfg),
        KAFKA_EPOCH_HEADER,
        _kafka_options(sink_settings(cfg)),
    )
    return written, final


def control(cfg: PipelineConfig, name: str) -> Target:
    """The control's target: the sink's server, under ``name`` (:func:`control_name`)."""
    return _sink_target(cfg, name)


def control_name(cfg: PipelineConfig, token: str) -> str:
    """A fresh destination name for one chaos run's control, next to the sink's."""
    sink = sink_settings(cfg)
    protocol = protocol_of(sink)
    if protocol == "postgres":
        schema, _, table = sink.destination.rpartition(".")
        base = f"{table[: 63 - 9 - len(token)]}_control_{token}"
        return f"{schema}.{base}"
    if protocol == "redis":
        return f"eo-chaos-control:{cfg.query_name}:{token}"
    if protocol == "kafka":
        return f"{sink.topic[: 249 - 9 - len(token)]}-control-{token}"
    return f"{sink.index[: 255 - 9 - len(token)]}-control-{token}".lower()


def _sink_target(cfg: PipelineConfig, name: str | None) -> Target:
    """The sink's target (``name`` None) or the control's, with the sink's crash points."""
    kind = registry.kind_of(sink_settings(cfg))
    points = (kind.chaos.mid_point or "", kind.chaos.committed_point)
    return dataclasses.replace(_plain_target(cfg, name), points=points, server=kind.name)


def _plain_target(cfg: PipelineConfig, name: str | None) -> Target:
    sink = sink_settings(cfg)
    keys = key_columns(cfg)
    mine = name is None
    protocol = protocol_of(sink)
    if protocol == "postgres":
        return Target(
            "postgres",
            sink.dsn.get_secret_value(),
            sink.destination if mine else str(name),
            keys,
            sink.epoch_column if mine else CONTROL_EPOCH,
        )
    if protocol == "redis":
        if mine and sink.write != "stream":
            raise ConfigError(
                "sink.write",
                f"write {sink.write!r} keeps one value per key, where a second write never "
                "shows: the independent audit reads stream writes",
            )
        if mine and re.search(r"\{[^}]*\}", sink.key_template):
            raise ConfigError(
                "sink.key_template", "the independent audit reads one stream: a constant key"
            )
        stream = sink.key_template.replace("{{", "{").replace("}}", "}")
        return Target(
            "redis",
            sink.url.get_secret_value(),
            stream if mine else str(name),
            keys,
            sink.epoch_field if mine else CONTROL_EPOCH,
        )
    if protocol == "kafka":
        return Target(
            "kafka",
            sink.bootstrap_servers,
            sink.topic if mine else str(name),
            keys,
            KAFKA_EPOCH_HEADER if mine else CONTROL_EPOCH,
            _kafka_options(sink),
        )
    if protocol == "elasticsearch":
        return Target(
            "elasticsearch",
            sink.hosts[0],
            sink.index if mine else str(name),
            keys,
            sink.epoch_field if mine else CONTROL_EPOCH,
            _es_options(sink),
        )
    raise ConfigError("sink.type", f"{sink.type!r}: no plain client for it here")


def _kafka_options(sink: Any) -> tuple[tuple[str, str], ...]:
    """The client settings that reach the brokers (security), none of the producer's own."""
    given = getattr(sink, "producer_config", None) or {}
    kept = {
        k: str(v)
        for k, v in given.items()
        if k.startswith(("security.", "sasl.", "ssl.")) or k == "client.dns.lookup"
    }
    return tuple(sorted(kept.items()))


def _es_options(sink: Any) -> tuple[tuple[str, str], ...]:
    found = {}
    if sink.api_key is not None:
        found["api_key"] = sink.api_key.get_secret_value()
    if sink.username is not None and sink.password is not None:
        found["username"] = sink.username
        found["password"] = sink.password.get_secret_value()
    if sink.ca_certs is not None:
        found["ca_certs"] = sink.ca_certs
    return tuple(sorted(found.items()))


def spark_committed(checkpoint: str | Path) -> int:
    """The last batch Spark's commit log holds (``<checkpoint>/commits/N``), -1 before any."""
    commits = Path(checkpoint) / "commits"
    try:
        names = [p.name for p in commits.iterdir()]
    except OSError:
        return -1
    return max((int(n) for n in names if n.isdigit()), default=-1)
