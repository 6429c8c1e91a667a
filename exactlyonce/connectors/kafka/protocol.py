"""The Kafka sink's wire protocol: header names, control-topic keys and the head record.

What a writer puts on the data topic (headers) and on the compacted control topic (keys and
JSON values), and the names both sides derive from a query and a sink. The reading recipe
that gives these their meaning is in :mod:`exactlyonce.connectors.kafka.reader`.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

# The frames' header names are the protocol's too (one definition: connectors/base/frames.py).
from exactlyonce.connectors.base.frames import H_RECORD_ID as H_RECORD_ID
from exactlyonce.connectors.base.frames import H_RECORD_IDS as H_RECORD_IDS
from exactlyonce.connectors.base.frames import RECORD_ID_BYTES as RECORD_ID_BYTES
from exactlyonce.errors import WireFormatError

DEFAULT_CONTROL_TOPIC = "exactlyonce-control"

H_QUERY = "eo-query"
H_EPOCH = "eo-epoch"
H_SHARD = "eo-shard"
H_ATTEMPT = "eo-attempt"
H_ERROR = "eo-error"  # dead letters only

# Wire format 1 of a data record: ONE header instead of the five above (each header costs
# librdkafka an allocation per message; five halved the producer's rate). Its value:
#   b"1|<epoch>|<shard>|<attempt>|<query>|" + the record's ID (32 hex digits, last)
# The query may hold "|": the ID is the last 32 bytes and the fields before the query are
# decimal or hex. :func:`expand_compact` gives a reader the five headers back.
H_COMPACT = "eo"
COMPACT_VERSION = b"1"
_COMPACT_NAMES = (H_EPOCH, H_SHARD, H_ATTEMPT, H_QUERY)

HEAD = "head"
CONFIRMED = "confirmed"
SYNC = "sync"
PROBE_KEY = "__exactlyonce_probe__"

# The columns the sink's projection hands to its tasks.
ID_COLUMN = "eo_record_id"
KEY_COLUMN = "eo_key"
VALUE_COLUMN = "eo_value"
EPOCH_COLUMN = "_eo_epoch"
RESERVED_COLUMNS = (ID_COLUMN, KEY_COLUMN, VALUE_COLUMN)

MIN_TRANSACTION_TIMEOUT_MS = 10_000  # a task's whole write runs inside one transaction
KAFKA_DEFAULT_MAX_TRANSACTION_TIMEOUT_MS = 900_000  # broker transaction.max.timeout.ms
DEAD_LETTER_PAYLOAD_LIMIT = 64 * 1024

# Only connection and security settings are shared between the sink's producers, consumers
# and admin clients; producer tuning would be noise (and a warning) in a consumer.
SHARED_CONFIG_PREFIXES = (
    "security.",
    "sasl.",
    "ssl.",
    "socket.",
    "broker.",
    "client.",
    "reconnect.",
    "metadata.",
    "api.version",
    "connections.",
    "enable.ssl",
    "topic.metadata.",
)


def default_sink_name(topic: str) -> str:
    """A Kafka sink's name when none is given: ``<type>:<destination>`` (its config's
    ``head_name``), the key of its head on the control topic."""
    return f"kafka:{topic}"


def dead_letter_topic_for(topic: str) -> str:
    return f"{topic}.dead-letters"


def transactional_id(query_name: str, sink_name: str, shard: int) -> str:
    """The ``transactional.id`` of one shard's producer (``-1``: the preflight probe's).
    Stable across re-runs and restarts, so a new attempt fences the older one."""
    return f"eo-{query_name}-{hashlib.sha1(sink_name.encode()).hexdigest()[:8]}-{shard}"


def partition_transactional_id(query_name: str, sink_name: str, partition: int) -> str:
    """The ``transactional.id`` of a Spark partition's producer on the data source path
    (``format("exactlyonce")``), whose tasks are Spark partitions, not shards: stable for
    (query, sink, partition), so a re-run of the partition fences the older attempt."""
    return f"eo-{query_name}-{hashlib.sha1(sink_name.encode()).hexdigest()[:8]}-p{partition}"


def compact_prefix(query_name: str, epoch: int, shard: int, attempt: str) -> bytes:
    """The part of an ``eo`` header (wire format 1) shared by every record of one attempt:
    a record's header value is this followed by its ID."""
    return b"%s|%d|%d|%s|%s|" % (
        COMPACT_VERSION,
        epoch,
        shard,
        attempt.encode(),
        query_name.encode(),
    )


def expand_compact(value: bytes) -> dict[str, bytes]:
    """An ``eo`` header's value as the five headers of wire format 0 (``eo-query``,
    ``eo-epoch``, ``eo-shard``, ``eo-attempt``, ``eo-record-id``). Fails closed: a value
    of another version, or malformed, raises :class:`WireFormatError` (a reader that skipped
    it would lose the record)."""
    version, _, rest = value.partition(b"|")
    if version != COMPACT_VERSION:
        raise WireFormatError(
            f"a record's {H_COMPACT!r} header is wire format {version[:8]!r}; this reader knows "
            f"{COMPACT_VERSION.decode()} (upgrade exactlyonce where the topic is read)"
        )
    meta, rid = rest[: -RECORD_ID_BYTES - 1], rest[-RECORD_ID_BYTES - 1 :]
    fields = meta.split(b"|", 3)
    if len(fields) != 4 or rid[:1] != b"|":
        raise WireFormatError(f"a malformed {H_COMPACT!r} header: {value[:120]!r}")
    out = dict(zip(_COMPACT_NAMES, fields, strict=True))
    out[H_RECORD_ID] = rid[1:]
    return out


def _part(name: str) -> str:
    return name.replace("%", "%25").replace("|", "%7C")


def control_prefix(query_name: str, sink_name: str) -> str:
    return f"{_part(query_name)}|{_part(sink_name)}|"


def head_key(query_name: str, sink_name: str) -> str:
    return control_prefix(query_name, sink_name) + HEAD


def marker_key(query_name: str, sink_name: str, epoch: int, shard: int) -> str:
    return f"{control_prefix(query_name, sink_name)}{epoch}|{shard}"


def confirmation_key(query_name: str, sink_name: str, epoch: int, shard: int, attempt: str) -> str:
    return f"{control_prefix(query_name, sink_name)}{epoch}|{shard}|{CONFIRMED}|{attempt}"


def sync_key(query_name: str, sink_name: str, shard: int) -> str:
    return f"{control_prefix(query_name, sink_name)}{SYNC}|{shard}"


def partition_sync_key(query_name: str, sink_name: str, partition: int) -> str:
    """The barrier key of a Spark partition's producer (data source path): the driver finds
    the partitions whose producers it fences at a start by these keys."""
    return f"{control_prefix(query_name, sink_name)}{SYNC}|p{partition}"


def shared_config(config: Mapping[str, Any]) -> dict[str, Any]:
    """The connection and security part of a client configuration."""
    return {k: v for k, v in config.items() if k.startswith(SHARED_CONFIG_PREFIXES)}


@dataclass(frozen=True)
class HeadRecord:
    """The head as the control topic holds it, with where it was found.

    ``origin`` (per topic, per partition): where each partition of the data and dead-letter
    topics ended when the head was created, before any task of the (query, sink) wrote: none
    of its records lies below. Empty for heads written before it was kept (then unknown: a
    reader must assume 0); a partition missing from it was created later (its origin is 0).
    """

    epoch: int
    spark_query_id: str | None
    num_shards: int
    frontier: dict[str, dict[int, int]]
    scan_from: int
    partition: int
    offset: int
    written_at: float | None = None  # when the driver wrote it (seconds since the epoch)
    origin: dict[str, dict[int, int]] = field(default_factory=dict)

    @classmethod
    def parse(cls, value: bytes, partition: int, offset: int) -> HeadRecord:
        data = json.loads(value)
        scan_from = data.get("scan_from")
        return cls(
            epoch=int(data["epoch"]),
            spark_query_id=data.get("spark_query_id"),
            num_shards=int(data["num_shards"]),
            frontier=offsets_by_topic(data.get("frontier")),
            scan_from=offset if scan_from is None else int(scan_from),
            partition=partition,
            offset=offset,
            written_at=float(data["written_at"]) if data.get("written_at") else None,
            origin=offsets_by_topic(data.get("origin")),
        )


def offsets_by_topic(value: Any) -> dict[str, dict[int, int]]:
    """A head's ``{topic: {"partition": offset}}`` JSON as numbers (None: empty)."""
    return {
        topic: {int(p): int(o) for p, o in parts.items()} for topic, parts in (value or {}).items()
    }
