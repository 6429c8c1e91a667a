"""Which pipelines the demo accepts: a Kafka source whose JSON values hold the demo's records
keyed by ``event_id``, into a PostgreSQL sink (audited in its table) or a Kafka sink (audited
in its topic). Both of the demo's pipelines read the same input topic. A pipeline file that
does not fit raises :class:`~exactlyonce.errors.ConfigError` naming the field."""

from __future__ import annotations

from exactlyonce.connectors.kafka.config import KafkaSinkConfig
from exactlyonce.connectors.kafka.protocol import DEFAULT_CONTROL_TOPIC
from exactlyonce.connectors.postgres.config import PostgresSinkConfig
from exactlyonce.errors import ConfigError
from exactlyonce.integration.config import KafkaSourceConfig, PipelineConfig
from exactlyonce.integration.lab.events import FIELDS


def pg_sink(cfg: PipelineConfig) -> PostgresSinkConfig:
    """The sink of a pipeline written to, and audited in, PostgreSQL."""
    if not isinstance(cfg.sink, PostgresSinkConfig):
        raise ConfigError("sink.type", "the demo audits a PostgreSQL table here: use postgres")
    return cfg.sink


def kafka_sink(cfg: PipelineConfig) -> KafkaSinkConfig:
    """The sink of a pipeline written to, and audited in, a Kafka topic."""
    if not isinstance(cfg.sink, KafkaSinkConfig):
        raise ConfigError("sink.type", "the demo audits a Kafka topic here: use kafka")
    if cfg.sink.control_topic == DEFAULT_CONTROL_TOPIC:
        raise ConfigError("sink.control_topic", "the demo deletes it: give it one of its own")
    return cfg.sink


def demo_source(cfg: PipelineConfig) -> KafkaSourceConfig:
    """The pipeline's Kafka source, checked to read the records :mod:`.producer` writes."""
    source = cfg.source
    if not isinstance(source, KafkaSourceConfig) or source.topic is None:
        raise ConfigError("source.type", "the demo produces to a Kafka topic: use type kafka")
    if "," in source.topic:
        raise ConfigError("source.topic", "the demo produces to one topic")
    missing = [f for f in FIELDS if f not in source.columns()]
    if missing:
        raise ConfigError("source.schema", f"the demo's records need column(s) {missing}")
    if tuple(cfg.sink.id_columns or ()) != ("event_id",):
        raise ConfigError("sink.id_columns", "the demo's records are keyed by [event_id]")
    return source


def demo_pipelines(
    pg: PipelineConfig, kafka: PipelineConfig
) -> tuple[KafkaSourceConfig, PostgresSinkConfig, KafkaSinkConfig]:
    """The shared source and the two sinks; ConfigError if the pair does not fit."""
    source = demo_source(pg)
    other = demo_source(kafka)
    if (other.topic, other.bootstrap_servers) != (source.topic, source.bootstrap_servers):
        raise ConfigError("source.topic", "both pipelines must read the same input topic")
    if pg.query_name == kafka.query_name or pg.checkpoint == kafka.checkpoint:
        raise ConfigError("query_name", "the two pipelines need their own name and checkpoint")
    return source, pg_sink(pg), kafka_sink(kafka)
