"""Exactly-once sinks: the shared contract in ``base``, one module per destination.

Each sink's class docstring states its guarantee and the mechanism behind it.
"""

from __future__ import annotations

from exactlyonce.connectors.base import BatchReport, ExactlyOnceSink, Head
from exactlyonce.connectors.elasticsearch import ElasticsearchSink
from exactlyonce.connectors.kafka import KafkaSink
from exactlyonce.connectors.postgres import PostgresSink
from exactlyonce.connectors.redis import RedisSink
from exactlyonce.errors import (
    AmbiguousCommitError,
    BadRecordError,
    CheckpointResetError,
    ConfigError,
    ExactlyOnceError,
    SinkUnavailableError,
)

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
    "PostgresSink",
    "RedisSink",
    "SinkUnavailableError",
]
