"""Errors by meaning.

Every error the library raises derives from :class:`ExactlyOnceError`. The subclass says what
the caller should do: fix the configuration, retry later, or look in the dead-letter
destination. All of them pickle cleanly, because Spark moves exceptions between processes.
No message ever contains a credential: build messages from redacted values only.

This module is the bottom of the package's layers: it imports nothing of ours, so every
layer (``dedup``, ``connectors``, ``buffer``, ``integration``) can raise these.
"""

from __future__ import annotations


class ExactlyOnceError(Exception):
    """Root of every error raised by exactlyonce."""


class ConfigError(ExactlyOnceError, ValueError):
    """The configuration is wrong. Raised before the stream starts; names the field."""

    def __init__(self, field: str, reason: str) -> None:
        super().__init__(f"{field}: {reason}")
        self.field = field
        self.reason = reason

    def __reduce__(self) -> tuple[type[ConfigError], tuple[str, str]]:
        return (type(self), (self.field, self.reason))


class ExpiredRecordsError(ConfigError):
    """Records of a buffer partition expired (retention) before the drainer wrote them:
    offsets ``first..last`` of ``topic[partition]`` are lost to the sink. The drain stops
    with this, never skipping them (DESIGN invariant 13); going on without them is an explicit
    reset of the drain offsets. Names the field ``buffer.topic``."""

    def __init__(self, topic: str, partition: int, first: int, last: int, reason: str) -> None:
        super().__init__("buffer.topic", reason)
        self.topic = topic
        self.partition = partition
        self.first = first
        self.last = last

    def __reduce__(  # type: ignore[override]
        self,
    ) -> tuple[type[ExpiredRecordsError], tuple[str, int, int, int, str]]:
        return (type(self), (self.topic, self.partition, self.first, self.last, self.reason))


class SinkUnavailableError(ExactlyOnceError):
    """The destination cannot be reached now. Transient: retrying later may succeed."""


class CheckpointResetError(ExactlyOnceError):
    """The sink head belongs to another Spark checkpoint (DESIGN invariant 9).

    Spark restarts at batchId 0 when its checkpoint is deleted. Every epoch would then look
    already committed and be skipped, so we refuse instead of silently losing data.
    """


class BadRecordError(ExactlyOnceError):
    """A record that cannot be written. It goes to the dead-letter destination."""


class AmbiguousCommitError(ExactlyOnceError):
    """A commit whose outcome is unknown (the reply was lost). Verify against the head."""


class CatalogLostError(ExactlyOnceError):
    """The catalog's Redis lost its data (restart without persistence, flush, failover)."""


class EpochSplitError(ExactlyOnceError):
    """A re-run of an epoch split its rows into Spark partitions differently than an earlier
    attempt (SPARK-28650), on a path whose append-only writes are keyed by partition: writing
    would append records twice or drop some, so the epoch is refused."""


class OffsetsMovedError(ExactlyOnceError):
    """The stored drain offsets are not what this drainer last read: re-read them, resume."""


class TaskStateError(ExactlyOnceError):
    """A shard task's method was called in a status that does not allow it (a bug, never
    a data problem): writing after a failure, or committing twice."""


class WireFormatError(ExactlyOnceError, ValueError):
    """A record in a wire format this reader does not know (a newer writer's), or
    malformed: refused, never skipped (skipping would lose it)."""


class FrontierMovedError(ExactlyOnceError):
    """A Real-time Mode writer found a source partition's frontier in the sink moved by
    another writer since it read it (an earlier attempt of its task still running, a
    speculative copy): it wrote nothing. Transient: Spark retries the task, whose writer
    reads the frontier again and skips what it covers."""
