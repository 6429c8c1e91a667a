"""Pipeline config files: typed, validated, frozen.

A pipeline file (YAML) names a streaming query, its checkpoint, trigger, source and sink::

    query_name: clicks-to-pg
    checkpoint: .exactlyonce/demo/checkpoint
    trigger: {processing_time: "1 second"}        # or {available_now: true}
    source:
      type: files
      format: json
      path: .exactlyonce/demo/input
      schema: "event_id STRING, user_id BIGINT, action STRING, ts TIMESTAMP"
      max_files_per_trigger: 1
    sink:
      type: postgres
      dsn: ${EXACTLYONCE_PG_DSN}
      table: demo_events
      id_columns: [event_id]

``${VAR}`` and ``${VAR:-default}`` in any string value are replaced from the environment, so
credentials never live in the file; ``$${`` stands for a literal ``${``. Relative paths are
relative to the working directory. Every error, whatever its cause (missing file, YAML syntax,
a missing variable, a bad field), is a :class:`~exactlyonce.errors.ConfigError`
naming the field by its dotted path (``sink.id_columns``). No message and no ``repr`` ever
shows a DSN: DSNs are :class:`pydantic.SecretStr`, and messages never echo input values.
"""

from __future__ import annotations

from exactlyonce.integration.config.loading import load_config, parse_config
from exactlyonce.integration.config.pipeline import PipelineConfig, SparkConfig, TriggerConfig
from exactlyonce.integration.config.sinks import (
    BufferedSink,
    KafkaBufferSettings,
    SinkEntry,
    build_sink,
    sink_field_errors,
)
from exactlyonce.integration.config.sources import (
    FilesSourceConfig,
    KafkaSourceConfig,
    RateSourceConfig,
    SourceConfig,
    ddl_column_names,
)

__all__ = [
    "BufferedSink",
    "FilesSourceConfig",
    "KafkaSourceConfig",
    "KafkaBufferSettings",
    "PipelineConfig",
    "RateSourceConfig",
    "SinkEntry",
    "SourceConfig",
    "SparkConfig",
    "TriggerConfig",
    "build_sink",
    "ddl_column_names",
    "load_config",
    "parse_config",
    "sink_field_errors",
]
