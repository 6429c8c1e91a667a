"""What a catalog holds, counted key by key (the slow way the stats hash spares each batch):
for the tests that check the counters against Redis itself, or against MemoryRedis."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from exactlyonce.dedup.catalog import RedisCatalog
from exactlyonce.dedup.layout import Layout


@dataclass(frozen=True)
class Held:
    ids: int  # 16-byte IDs in the live generations' buckets
    memory_bytes: int  # MEMORY USAGE summed over the live generations' bucket and filter keys
    all_bytes: int  # MEMORY USAGE summed over every key of the catalog (meta, stats, journals)
    keys: int  # every key of the catalog


def generation_of(key: str) -> int | None:
    """The generation of a bucket (``<s>:c:g:b``) or filter (``<s>:b:g``, ``<s>:bv:g``) key."""
    rest = key.rpartition("}:")[2].split(":")
    return int(rest[1]) if rest[0] in ("c", "b", "bv") else None


def catalog_keys(catalog: RedisCatalog) -> list[str]:
    """Every key of the catalog (SCAN on every master of a cluster)."""
    keys = catalog.keys
    return sorted(
        {
            raw.decode()
            for pattern in keys.patterns
            for raw in catalog.redis.scan_iter(match=pattern, count=1000)
            if keys.owns(raw.decode())
        }
    )


def held(catalog: RedisCatalog, layout: Layout, epoch: int) -> Held:
    redis: Any = catalog.redis
    live = set(layout.live(epoch))
    ids = memory = total = count = 0
    for key in catalog_keys(catalog):
        usage = int(redis.memory_usage(key) or 0)
        total += usage
        count += 1
        gen = generation_of(key)
        if gen is None or gen not in live:
            continue
        memory += usage
        if key.rpartition("}:")[2].startswith("c:"):
            ids += int(redis.strlen(key)) // 16
    return Held(ids, memory, total, count)
