"""Exactly-once sinks. One module per destination; ``base`` holds the shared contract."""

from exactlyonce.connectors.base import BatchReport, ExactlyOnceSink, Head
from exactlyonce.connectors.errors import (
    AmbiguousCommitError,
    BadRecordError,
    CheckpointResetError,
    ConfigError,
    ExactlyOnceError,
    SinkUnavailableError,
)
from exactlyonce.connectors.postgres import PostgresSink

__all__ = [
    "AmbiguousCommitError",
    "BadRecordError",
    "BatchReport",
    "CheckpointResetError",
    "ConfigError",
    "ExactlyOnceError",
    "ExactlyOnceSink",
    "Head",
    "PostgresSink",
    "SinkUnavailableError",
]
