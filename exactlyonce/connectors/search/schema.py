"""The indices the sink writes: names checked, mappings (control, dead letters, target), and
their creation when missing."""

from __future__ import annotations

import logging
from typing import Any

from exactlyonce.connectors.search.connection import SearchConnection, call
from exactlyonce.connectors.search.engine import BadRequest, Client
from exactlyonce.errors import ConfigError
from exactlyonce.retry import RetryPolicy

log = logging.getLogger("exactlyonce.search")

ID_COLUMN = "_id"  # the record ID travels as the document's _id, never inside _source
CONTROL_INDEX = "exactlyonce-control"
# The Real-time Mode frontier documents' own fields (:mod:`.realtime`); put into a control
# index made before them, too.
RTM_FRONTIER_PROPERTIES: dict[str, Any] = {
    "topic": {"type": "keyword"},
    "partition": {"type": "integer"},
    "next_offset": {"type": "long"},
    "spark_partition": {"type": "integer"},
}
CONTROL_MAPPING: dict[str, Any] = {
    "dynamic": "strict",
    "properties": {
        "kind": {"type": "keyword"},
        "query_name": {"type": "keyword"},
        "sink": {"type": "keyword"},
        "epoch": {"type": "long"},
        "shard": {"type": "integer"},
        "num_shards": {"type": "integer"},
        "spark_query_id": {"type": "keyword"},
        "writer": {"type": "keyword"},
        "updated_at": {"type": "date"},
        **RTM_FRONTIER_PROPERTIES,
    },
}
DEAD_LETTER_MAPPING: dict[str, Any] = {
    "properties": {
        "query_name": {"type": "keyword"},
        "sink": {"type": "keyword"},
        "index": {"type": "keyword"},
        "epoch": {"type": "long"},
        "shard": {"type": "integer"},
        "record_id": {"type": "keyword"},
        "error": {"type": "text"},
        "payload": {"type": "text", "index": False},
    }
}
_BAD_INDEX_CHARS = set('\\/*?"<>| ,#:')


def check_index_name(field: str, name: str) -> str:
    """``name`` if Elasticsearch and OpenSearch accept it as an index name, else a ConfigError
    on ``field``."""
    if (
        not isinstance(name, str)
        or not name
        or name != name.lower()
        or name[0] in "-_+"
        or name in (".", "..")
        or len(name.encode()) > 255
        or any(c in _BAD_INDEX_CHARS for c in name)
    ):
        raise ConfigError(
            field,
            f"{name!r} is not a valid index name (lowercase, no spaces or "
            '\\ / * ? " < > | , # :, not starting with - _ +)',
        )
    return name


def target_mapping(mapping: dict[str, Any] | None, epoch_field: str) -> dict[str, Any]:
    """The target index's mappings: the user's (full, or ``{column: type}``) plus the epoch."""
    given = dict(mapping or {})
    if "properties" in given:
        mappings = {**given, "properties": dict(given["properties"])}
    else:
        props = {k: {"type": v} if isinstance(v, str) else v for k, v in given.items()}
        mappings = {"properties": props}
    mappings["properties"].setdefault(epoch_field, {"type": "long"})
    return mappings


def ensure_index(
    conn: SearchConnection,
    client: Client,
    policy: RetryPolicy,
    name: str,
    mappings: dict[str, Any],
) -> None:
    """Create index ``name`` unless it exists (created meanwhile by another driver is fine)."""
    exists = call(conn, client, policy, f"checking index {name!r}", lambda c: c.index_exists(name))
    if exists:
        return
    try:
        call(
            conn,
            client,
            policy,
            f"creating index {name!r}",
            lambda c: c.create_index(name, mappings),
            answers=(BadRequest,),
        )
        log.info("created index %s", name)
    except BadRequest as exc:
        if exc.message != "resource_already_exists_exception":  # else: created meanwhile
            raise ConfigError(
                "mapping", f"{conn.name} refused to create index {name!r}: {exc.message}"
            ) from None
