"""Live checks of a Redis the guarantee leans on: its persistence and its eviction policy.

Two Redis roles, with different stakes:

- a sink's own Redis (RedisSink) holds the records and the head: what it loses after
  acknowledging is lost for good, so it must persist every commit (``appendonly yes``,
  ``appendfsync always``) and never evict;
- the dedup catalog's Redis is a cache of IDs already written (DESIGN invariant 4): losing it
  whole is detected (an instance id) and survived, but an EVICTION or the last second of an
  ``everysec`` AOF loses part of it undetected, and an appending sink then writes a replayed
  record again.
"""

from __future__ import annotations

from typing import Any

from exactlyonce.connectors.base.guarantee import FAILING, OK, WARNING, Check, checked
from exactlyonce.errors import SinkUnavailableError
from exactlyonce.secrets import redact_dsn

CONFIG_HIDDEN = "CONFIG GET is refused (a managed Redis?): not checked"


def config_values(client: Any, where: str, *names: str) -> dict[str, str] | None:
    """``CONFIG GET`` of ``names``; None when the server refuses CONFIG (managed Redis).
    A server that cannot be reached raises SinkUnavailableError."""
    import redis

    try:
        client.ping()
    except (redis.ConnectionError, redis.TimeoutError) as exc:
        raise SinkUnavailableError(f"cannot reach Redis at {where}: {exc}") from None
    values: dict[str, str] = {}
    try:
        for name in names:
            got = client.config_get(name)
            values[name] = str(_text(got.get(name, got.get(name.encode(), ""))))
    except redis.ResponseError:
        return None
    return values


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def sink_persistence(values: dict[str, str] | None) -> Check:
    """The sink's own Redis: every acknowledged commit must survive a restart."""
    name = "sink Redis persistence"
    if values is None:
        return Check(
            name, WARNING, CONFIG_HIDDEN, "make sure it runs appendonly yes, appendfsync always"
        )
    aof, fsync = values.get("appendonly"), values.get("appendfsync")
    if aof != "yes":
        return Check(
            name,
            FAILING,
            "appendonly no: a restart loses committed records and the head (the sink then "
            "refuses to write, and what was lost stays lost)",
            "CONFIG SET appendonly yes, appendfsync always (and in redis.conf)",
        )
    if fsync == "always":
        return Check(
            name, OK, "appendonly yes, appendfsync always: a commit is on disk when acknowledged"
        )
    return Check(
        name,
        WARNING,
        f"appendonly yes, appendfsync {fsync}: a crash of the machine (not of Redis alone) "
        "can lose up to a second of acknowledged commits, which Spark will not re-run",
        "appendfsync always",
    )


def catalog_persistence(values: dict[str, str] | None, unique_sink: bool) -> Check:
    """The catalog's Redis: a whole loss is detected and survived; a partial one is not."""
    name = "catalog Redis persistence"
    if values is None:
        return Check(name, WARNING, CONFIG_HIDDEN, "appendonly yes, appendfsync always")
    aof, fsync = values.get("appendonly"), values.get("appendfsync")
    survive = (
        "the sink's own keys and head keep it exactly once"
        if unique_sink
        else "the sink rebuilds it from its own records (on_catalog_loss: rebuild) or stops (fail)"
    )
    if aof != "yes":
        return Check(
            name,
            WARNING,
            f"appendonly no: a restart empties the catalog (detected); {survive}",
            "appendonly yes, appendfsync always",
        )
    if fsync == "always" or unique_sink:
        return Check(name, OK, f"appendonly yes, appendfsync {fsync}")
    return Check(
        name,
        WARNING,
        f"appendonly yes, appendfsync {fsync}: a machine crash can lose the last second of "
        "marks undetected, and this sink appends: a replay of those records is written again",
        "appendfsync always",
    )


def eviction(values: dict[str, str] | None, role: str) -> Check:
    """Anything but ``noeviction`` lets Redis delete keys under memory pressure: for the
    catalog a partial, undetected loss; for a sink's Redis lost records or a lost head."""
    name = f"{role} Redis maxmemory-policy"
    if values is None:
        return Check(name, WARNING, CONFIG_HIDDEN, "maxmemory-policy noeviction")
    policy, limit = values.get("maxmemory-policy"), values.get("maxmemory", "0")
    if policy == "noeviction":
        return Check(name, OK, "noeviction: a full Redis refuses writes, never drops keys")
    reach = "now" if limit not in ("0", "") else "as soon as maxmemory is set"
    return Check(
        name,
        FAILING,
        f"{policy} (maxmemory {limit}): Redis deletes keys {reach} under memory pressure: "
        + (
            "a partial catalog loss nobody detects (an appending sink then writes replays again)"
            if role == "catalog"
            else "committed records or the head vanish"
        ),
        "CONFIG SET maxmemory-policy noeviction (and in redis.conf)",
    )


def catalog_checks(dedup: Any, unique_sink: bool) -> list[Check]:
    """The dedup catalog's Redis (a :class:`DedupConfig`): reachable, persistent, no eviction."""
    where = redact_dsn(dedup.redis_url)

    def run() -> list[Check]:
        client = dedup.open_client()
        try:
            values = config_values(
                client, where, "appendonly", "appendfsync", "maxmemory-policy", "maxmemory"
            )
        finally:
            client.close()
        return [
            Check("catalog Redis", OK, f"reachable at {where}"),
            catalog_persistence(values, unique_sink),
            eviction(values, "catalog"),
        ]

    return checked("catalog Redis", run)
