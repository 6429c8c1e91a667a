"""What ``exactlyonce check`` reports for a RedisSink: its guarantee per write mode, and its
preconditions read from the sink's Redis (reachable, standalone, persistent, no eviction),
writing nothing."""

from __future__ import annotations

from typing import TYPE_CHECKING

from exactlyonce.connectors.base.guarantee import OK, Check, Guarantee, checked
from exactlyonce.connectors.base.redis_health import config_values, eviction, sink_persistence
from exactlyonce.connectors.redis.connection import connect, require_standalone

if TYPE_CHECKING:
    from exactlyonce.connectors.redis.parts import RedisParts

_SCRIPT = (
    "one Lua script per task applies its records, shard markers and dead letters atomically "
    "and checks the head itself, so a re-run of a committed epoch or shard is a no-op decided "
    "by Redis"
)


def guarantee(sink: RedisParts) -> Guarantee:
    if sink.upsert is not None:
        return Guarantee(
            "EXACTLY ONCE per key and epoch (upsert: the latest epoch's value, never rolled back)",
            f"{_SCRIPT}; the script compares each key's stored epoch and skips older ones.",
        )
    if sink.write == "stream":
        return Guarantee(
            "EXACTLY ONCE",
            f"{_SCRIPT}; stream appends are not idempotent, so the markers, the head and the "
            "dedup catalog (rebuilt from the streams' record IDs if lost) keep them single.",
        )
    return Guarantee(
        "EXACTLY ONCE",
        f"{_SCRIPT}; a {sink.write} key per record makes a re-write idempotent.",
    )


def preconditions(sink: RedisParts) -> list[Check]:
    def run() -> list[Check]:
        client = connect(
            sink.url,
            retries=0,
            socket_timeout=sink.connect_timeout,
            connect_timeout=sink.connect_timeout,
        )
        try:
            values = config_values(
                client, sink.where, "appendonly", "appendfsync", "maxmemory-policy", "maxmemory"
            )
            with sink.reaching():
                require_standalone(client, sink.head_key)
        finally:
            client.close()
        return [
            Check("sink Redis", OK, f"reachable at {sink.where}, standalone"),
            sink_persistence(values),
            eviction(values, "sink"),
        ]

    return checked("sink Redis", run)
