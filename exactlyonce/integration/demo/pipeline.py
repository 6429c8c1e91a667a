"""Which pipelines the demo accepts: a PostgreSQL sink, and a JSON files source whose columns
hold the demo's records keyed by ``event_id``. A pipeline file that does not fit raises
:class:`~exactlyonce.errors.ConfigError` naming the field."""

from __future__ import annotations

from exactlyonce.errors import ConfigError
from exactlyonce.integration.config import FilesSourceConfig, PipelineConfig, PostgresSinkConfig
from exactlyonce.integration.demo.inputs import FIELDS


def pg_sink(cfg: PipelineConfig) -> PostgresSinkConfig:
    """The demo writes to, and audits, PostgreSQL."""
    if not isinstance(cfg.sink, PostgresSinkConfig):
        raise ConfigError("sink.type", "the demo audits a PostgreSQL table: use type postgres")
    return cfg.sink


def demo_source(cfg: PipelineConfig) -> FilesSourceConfig:
    """The pipeline's files source, checked to read the records :mod:`.inputs` writes."""
    pg_sink(cfg)
    source = cfg.source
    if not isinstance(source, FilesSourceConfig) or source.format != "json":
        raise ConfigError("source.type", "the demo generates JSON files: use type files, json")
    missing = [f for f in FIELDS if f not in source.columns()]
    if missing:
        raise ConfigError("source.schema", f"the demo's records need column(s) {missing}")
    if tuple(cfg.sink.id_columns) != ("event_id",):
        raise ConfigError("sink.id_columns", "the demo's records are keyed by [event_id]")
    return source
