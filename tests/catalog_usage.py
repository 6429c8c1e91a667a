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


def generation_of(catalog: RedisCatalog, key: str) -> int | None:
    """The generation of a bucket (``:c:s:g:b``) or filter (``:b:s:g``, ``:bv:s:g``) key."""
    rest = key[len(catalog.prefix) + 1 :].split(":")
    return int(rest[2]) if rest[0] in ("c", "b", "bv") else None


def held(catalog: RedisCatalog, layout: Layout, epoch: int) -> Held:
    redis: Any = catalog.redis
    live = set(layout.live(epoch))
    ids = memory = total = count = 0
    for raw in redis.scan_iter(match=catalog.keys.everything, count=1000):
        key = raw.decode()
        usage = int(redis.memory_usage(key) or 0)
        total += usage
        count += 1
        gen = generation_of(catalog, key)
        if gen is None or gen not in live:
            continue
        memory += usage
        if key[len(catalog.prefix) + 1 :].startswith("c:"):
            ids += int(redis.strlen(key)) // 16
    return Held(ids, memory, total, count)
