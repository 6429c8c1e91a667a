"""Exactly-once sinks. One module per destination; ``base`` holds the shared contract.

Names are imported lazily so that ``exactlyonce.connectors.errors`` can be used by the
``dedup`` package without importing every sink (and without an import cycle).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from exactlyonce.connectors.base import BatchReport, ExactlyOnceSink, Head
    from exactlyonce.connectors.elasticsearch import ElasticsearchSink
    from exactlyonce.connectors.errors import (
        AmbiguousCommitError,
        BadRecordError,
        CheckpointResetError,
        ConfigError,
        ExactlyOnceError,
        SinkUnavailableError,
    )
    from exactlyonce.connectors.kafka import KafkaSink
    from exactlyonce.connectors.postgres import PostgresSink
    from exactlyonce.connectors.redis import RedisSink

_WHERE = {
    "BatchReport": "base",
    "ExactlyOnceSink": "base",
    "Head": "base",
    "AmbiguousCommitError": "errors",
    "BadRecordError": "errors",
    "CheckpointResetError": "errors",
    "ConfigError": "errors",
    "ExactlyOnceError": "errors",
    "SinkUnavailableError": "errors",
    "ElasticsearchSink": "elasticsearch",
    "KafkaSink": "kafka",
    "PostgresSink": "postgres",
    "RedisSink": "redis",
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
    "PostgresSink",
    "RedisSink",
    "SinkUnavailableError",
]


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module 'exactlyonce.connectors' has no attribute {name!r}")
    return getattr(importlib.import_module(f"exactlyonce.connectors.{_WHERE[name]}"), name)
