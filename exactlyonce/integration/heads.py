"""What ``exactlyonce heads`` shows of a query, read without changing anything: its head,
the shard commits above it, its dedup catalog, and for a buffered pipeline the drainer's
offsets and lag. :func:`query_state` returns it as one JSON-ready document::

    {
      "query_name": str, "sink": str (the head's key), "kind": str (postgres, redis,
      elasticsearch, kafka, buffer),
      "head": null | {"epoch": int, "spark_query_id": str | null, "num_shards": int,
                      "advanced_at": ISO-8601 UTC str | null},
      "shard_commits": null (not listed by this sink) | {"<epoch>": [shard, ...]},
      "catalog": null (dedup off) | {"exists": false} | {"exists": true, "shards": int,
                 "generations": [live gen, ...], "live_ids": int, "bytes": int,
                 "bytes_per_id": float | null,
                 "per_generation": {"<gen>": {"ids": int, "bytes": int}}},
      "buffer": null (no buffer) | {"topic": str, "drain_target": str,
                 "positions": {"<partition>": next offset},
                 "lag": null (no buffer topic yet) | {"records": int, "seconds": float}}
    }
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from exactlyonce.connectors.base import NO_EPOCH, Head
from exactlyonce.errors import SinkUnavailableError
from exactlyonce.secrets import redact_dsn

if TYPE_CHECKING:
    from exactlyonce.connectors.base import ExactlyOnceSink
    from exactlyonce.dedup.config import DedupConfig


def iso_utc(seconds: float | None) -> str | None:
    if seconds is None:
        return None
    moment = datetime.fromtimestamp(seconds, tz=timezone.utc)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def head_json(head: Head | None) -> dict[str, Any] | None:
    if head is None:
        return None
    return {
        "epoch": head.epoch,
        "spark_query_id": head.spark_query_id,
        "num_shards": head.num_shards,
        "advanced_at": iso_utc(head.advanced_at),
    }


def query_state(sink: ExactlyOnceSink) -> dict[str, Any]:
    """The document described in the module docstring, for ``sink`` (built with
    ``check=False``: no preflight, which would create tables, indices or topics)."""
    head = sink.peek_head()
    commits = sink.rewinder().shard_commits()
    return {
        "query_name": sink.query_name,
        "sink": sink.sink_name,
        "kind": sink.kind,
        "head": head_json(head),
        "shard_commits": None
        if commits is None
        else {str(e): shards for e, shards in sorted(commits.items())},
        "catalog": catalog_state(sink, head.epoch if head is not None else NO_EPOCH),
        "buffer": buffer_state(sink),
    }


def catalog_state(sink: ExactlyOnceSink, head_epoch: int) -> dict[str, Any] | None:
    if sink.dedup_config is None:
        return None
    return _catalog(sink.dedup_config, sink.query_name, sink.sink_name, head_epoch)


def _catalog(config: DedupConfig, query_name: str, sink_name: str, epoch: int) -> dict[str, Any]:
    """The catalog's meta and usage counters (meta, then the shards' counters summed)."""
    import redis

    from exactlyonce.dedup.catalog import CatalogUsage, Layout, RedisCatalog

    catalog = RedisCatalog(config, query_name, sink_name)
    try:
        meta = catalog.meta()
        if not meta:
            return {"exists": False}
        layout = Layout.from_meta(meta)
        stats = catalog.stats(layout.shards)
    except redis.RedisError as exc:  # its text may name the URL: only the type is shown
        where = redact_dsn(config.redis_url)
        raise SinkUnavailableError(
            f"cannot read the dedup catalog at {where}: {type(exc).__name__}"
        ) from None
    finally:
        catalog.close()
    live = layout.live(epoch)
    usage = CatalogUsage.from_stats(stats, live)
    per_gen = {str(g): _generation(stats, g) for g in live}
    return {
        "exists": True,
        "shards": layout.shards,
        "generations": live,
        "live_ids": usage.ids,
        "bytes": usage.memory_bytes,
        "bytes_per_id": usage.bytes_per_id,
        "per_generation": per_gen,
    }


def _generation(stats: dict[bytes, bytes], gen: int) -> dict[str, int]:
    return {
        "ids": int(stats.get(f"ids:{gen}".encode(), 0)),
        "bytes": int(stats.get(f"bytes:{gen}".encode(), 0)),
    }


def buffer_state(sink: ExactlyOnceSink) -> dict[str, Any] | None:
    from exactlyonce.buffer import Buffered

    if not isinstance(sink, Buffered):
        return None
    from exactlyonce.buffer.drain.status import drain_status

    status = drain_status(sink)
    lag = status.lag
    return {
        "topic": status.topic,
        "drain_target": status.target,
        "positions": {str(p): o for p, o in sorted(status.positions.items())},
        "lag": None if lag is None else {"records": lag.records, "seconds": lag.seconds},
    }


__all__ = ["catalog_state", "head_json", "iso_utc", "query_state"]
