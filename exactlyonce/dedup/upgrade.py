"""Catalogs left in layout 1 (one hash tag per query) by an earlier version: move or drop.

A moved catalog is in layout 2 (its journals are not in a journal index: see :mod:`.keys`).

Layout 1 kept every key of a catalog under the query's prefix; its meta hash has no
``layout`` field (see :mod:`.keys`). Reading it with layout 2's names would find no shard
marker and no bucket: an empty catalog taken for a complete one would answer "new" for IDs
the sink holds (DESIGN invariant 3). So the driver, at start, before anything reads it:

- on a standalone Redis, renames every old key to its layout-2 name (RENAME keeps the value,
  crosses slots only where there are none), moves the old stats hash to shard 0's (readers
  sum the shards, so the totals stay exact), writes the shard markers, and only then sets
  ``layout`` in meta. A crash in between leaves ``layout`` unset, and the next start
  resumes: each old key is renamed once, as it no longer exists after;
- on a Redis Cluster (where RENAME cannot cross slots, and layout 1 never worked), drops the
  old keys and reports the catalog lost: the keeper rebuilds it from the sink, starts an
  empty one for a sink with a unique key, or refuses (invariant 4).
"""

from __future__ import annotations

import logging
from typing import Any

from exactlyonce.dedup.catalog import RedisCatalog
from exactlyonce.dedup.keys import UNINDEXED_LAYOUT

log = logging.getLogger("exactlyonce.dedup")

__all__ = ["is_cluster_client", "upgrade_layout"]


def is_cluster_client(client: Any) -> bool:
    try:
        from redis.cluster import RedisCluster
    except ImportError:  # pragma: no cover - redis-py always has it
        return False
    return isinstance(client, RedisCluster)


def upgrade_layout(catalog: RedisCatalog, meta: dict[str, str]) -> dict[str, str]:
    """Meta of the catalog in layout 2: renamed in place, or ``{}`` when it was dropped."""
    if is_cluster_client(catalog.redis):
        dropped = catalog.drop()
        log.warning(
            "catalog %s: layout 1 on a Redis Cluster cannot be moved; dropped %d keys",
            catalog.prefix,
            dropped,
        )
        return {}
    moved = _rename_old_keys(catalog)
    shards = int(meta["shards"])
    pipe = catalog.redis.pipeline(transaction=True)
    for shard in range(shards):
        pipe.set(catalog.keys.marker(shard), meta["instance"])
    pipe.hset(catalog.keys.meta, mapping={"layout": UNINDEXED_LAYOUT})
    pipe.execute()
    log.warning("catalog %s: moved %d keys from layout 1 to layout 2", catalog.prefix, moved)
    return {**meta, "layout": UNINDEXED_LAYOUT}


def _rename_old_keys(catalog: RedisCatalog) -> int:
    """RENAME every layout-1 key of the catalog to its layout-2 name; the number moved."""
    redis, keys, base = catalog.redis, catalog.keys, catalog.prefix + ":"
    old = [
        raw.decode()
        for pattern in keys.patterns[1:-1]  # layout 1's, without meta and layout 2's
        for raw in redis.scan_iter(match=pattern, count=1000)
    ]
    moved = 0
    for key in old:
        kind, _, rest = key[len(base) :].partition(":")
        new = _new_name(catalog, kind, rest)
        if new is None:
            redis.delete(key)  # a scratch filter, or a stray key: nothing to keep
        else:
            redis.rename(key, new)
            moved += 1
    return moved


def _new_name(catalog: RedisCatalog, kind: str, rest: str) -> str | None:
    """Layout 2's name of ``<p>:<kind>:<rest>`` (None for what is not kept)."""
    keys = catalog.keys
    parts = rest.split(":")
    if kind == "stats" and rest == "":
        return keys.stats(0)
    if kind == "c" and len(parts) == 3:
        return f"{keys.bucket_prefix(int(parts[0]), int(parts[1]))}{parts[2]}"
    if kind == "j" and len(parts) == 2:
        return keys.journal(int(parts[0]), int(parts[1]))
    if kind == "b" and len(parts) == 2:
        return keys.bloom(int(parts[0]), int(parts[1]))
    if kind == "bv" and len(parts) == 2:
        return keys.bloom_version(int(parts[0]), int(parts[1]))
    return None
