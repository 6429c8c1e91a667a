"""The config model of each sink, by the name ``format("exactlyonce")``'s ``sink`` option,
a pipeline file's ``type:`` and a sink URL's scheme use for it."""

from __future__ import annotations

from exactlyonce.connectors.base.config import SinkConfig
from exactlyonce.connectors.elasticsearch.config import ElasticsearchSinkConfig
from exactlyonce.connectors.kafka.config import KafkaSinkConfig
from exactlyonce.connectors.postgres.config import PostgresSinkConfig
from exactlyonce.connectors.redis.config import RedisSinkConfig

SINK_CONFIGS: dict[str, type[SinkConfig]] = {
    "postgres": PostgresSinkConfig,
    "kafka": KafkaSinkConfig,
    "elasticsearch": ElasticsearchSinkConfig,
    "redis": RedisSinkConfig,
}
