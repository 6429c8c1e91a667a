"""Exactly-once sinks: the shared contract in ``base``, one module per destination.

Each sink's class docstring states its guarantee and the mechanism behind it.

The sinks are imported on first use (PEP 562): a Spark task that unpickles a PostgreSQL
writer imports ``exactlyonce.connectors`` on its way, and must not pay for the Kafka,
Elasticsearch and Redis clients too (seconds per cold Python worker, after every restart).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from exactlyonce.errors import (
    AmbiguousCommitError,
    BadRecordError,
    CheckpointResetError,
    ConfigError,
    ExactlyOnceError,
    SinkUnavailableError,
)
from exactlyonce.lazy import lazy_exports

if TYPE_CHECKING:
    from exactlyonce.connectors.base import BatchReport, ExactlyOnceSink, Head
    from exactlyonce.connectors.elasticsearch import ElasticsearchSink
    from exactlyonce.connectors.kafka import KafkaSink
    from exactlyonce.connectors.opensearch import OpenSearchSink
    from exactlyonce.connectors.postgres import PostgresSink
    from exactlyonce.connectors.redis import RedisSink

# Public name -> the module that defines it, imported when the name is first asked for.
_LAZY = {
    "BatchReport": "exactlyonce.connectors.base",
    "ExactlyOnceSink": "exactlyonce.connectors.base",
    "Head": "exactlyonce.connectors.base",
    "ElasticsearchSink": "exactlyonce.connectors.elasticsearch",
    "KafkaSink": "exactlyonce.connectors.kafka",
    "OpenSearchSink": "exactlyonce.connectors.opensearch",
    "PostgresSink": "exactlyonce.connectors.postgres",
    "RedisSink": "exactlyonce.connectors.redis",
}


__all__ = [
    "AmbiguousCommitError",
    "BadRecordError",
    "BatchReport",
    "CheckpointResetError",
    "ConfigError",
    "ElasticsearchSink",
    "ExactlyOnceError",
    "ExactlyOnceSink",
    "Head",
    "KafkaSink",
    "OpenSearchSink",
    "PostgresSink",
    "RedisSink",
    "SinkUnavailableError",
]

__getattr__, __dir__ = lazy_exports(globals(), _LAZY)
