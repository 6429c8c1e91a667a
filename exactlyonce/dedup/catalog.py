"""The Redis catalog of record IDs already written, per (query, sink, shard): its operations.

:class:`RedisCatalog` creates, marks, looks up, rolls back and expires one (query, sink)'s
catalog. What it relies on lives beside it: the settings in :mod:`.config`, the sizing
(generations, buckets) in :mod:`.layout`, the key names in :mod:`.keys` and the Lua scripts in
:mod:`.scripts`. Their names are re-exported here, where callers have always imported them.

All traffic is batched: one Lua call marks or looks up up to 200,000 IDs, grouped by bucket.
Every call checks ``instance`` first, so a Redis that restarted empty is detected (it answers
CATALOG_LOST) instead of answering "never seen" for everything.

The scripts that change the catalog keep per-generation usage counters in its stats hash, in
the same atomic step (see :mod:`.scripts`); :meth:`RedisCatalog.usage` reads them with one
HGETALL: the IDs the catalog can still recognise and the Redis memory they take.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from exactlyonce.dedup.bloom import BloomFilter, Ids
from exactlyonce.dedup.config import DedupConfig
from exactlyonce.dedup.keys import CatalogKeys, namespace
from exactlyonce.dedup.layout import MAX_PER_CALL, Layout, buckets, pack_groups
from exactlyonce.dedup.scripts import LUA_LOOKUP, LUA_MARK, LUA_MERGE, LUA_UNMARK
from exactlyonce.errors import CatalogLostError

__all__ = [
    "LUA_LOOKUP",
    "LUA_MARK",
    "LUA_MERGE",
    "LUA_UNMARK",
    "MAX_PER_CALL",
    "CatalogKeys",
    "CatalogUsage",
    "DedupConfig",
    "Layout",
    "RedisCatalog",
    "buckets",
    "namespace",
]

Blooms = dict[int, tuple[int, BloomFilter]]  # generation -> (version, filter)


@dataclass(frozen=True)
class CatalogUsage:
    """What the catalog holds in its live generations: the IDs it can still recognise (an ID
    marked twice counts twice), and the Redis memory of their bucket and Bloom filter keys
    (``MEMORY USAGE``; the small meta and stats hashes and the journals of epochs above the
    head are not counted)."""

    ids: int
    memory_bytes: int

    @property
    def bytes_per_id(self) -> float | None:
        return self.memory_bytes / self.ids if self.ids else None

    @classmethod
    def from_stats(cls, stats: dict[bytes, bytes], gens: Iterable[int]) -> CatalogUsage:
        """The sum of the stats hash's counters over ``gens``."""
        live = {str(g).encode() for g in gens}
        ids = size = 0
        for name, value in stats.items():
            kind, _, gen = name.partition(b":")
            if gen in live:
                if kind == b"ids":
                    ids += int(value)
                elif kind == b"bytes":
                    size += int(value)
        return cls(ids, size)


class RedisCatalog:
    """One (query, sink)'s catalog. Cheap to build; opens its Redis connection lazily.

    Built by the driver's :class:`~exactlyonce.dedup.keeper.CatalogKeeper` and by each
    executor task's :class:`~exactlyonce.dedup.shard.TaskDedup`. It never retries: a failed
    call raises, and the keeper decides (``recoverable()``) whether the epoch may run again.
    """

    def __init__(self, config: DedupConfig, query_name: str, sink_name: str) -> None:
        self.config = config
        self.keys = CatalogKeys(namespace(query_name, sink_name))
        self.prefix = self.keys.prefix
        self._redis: Any = None
        self._scripts: dict[str, Any] = {}

    @property
    def redis(self) -> Any:
        if self._redis is None:
            self._redis = self.config.open_client()
        return self._redis

    @property
    def meta_key(self) -> str:
        return self.keys.meta

    def close(self) -> None:
        if self._redis is not None:
            self._redis.close()
            self._redis = None

    def _script(self, source: str) -> Any:
        if source not in self._scripts:
            self._scripts[source] = self.redis.register_script(source)
        return self._scripts[source]

    def _lost(self) -> CatalogLostError:
        return CatalogLostError(f"catalog {self.prefix} was lost (Redis restarted empty?)")

    # -- meta --------------------------------------------------------------------------

    def meta(self) -> dict[str, str]:
        raw = self.redis.hgetall(self.keys.meta)
        return {k.decode(): v.decode() for k, v in raw.items()}

    def create(self, layout: Layout) -> str:
        """A new, empty catalog with a fresh instance id (after loss, or the first start)."""
        instance = uuid.uuid4().hex
        pipe = self.redis.pipeline(transaction=True)
        pipe.delete(self.keys.stats)
        pipe.hset(self.keys.meta, mapping={"instance": instance, **layout.to_meta()})
        pipe.execute()
        return instance

    def usage(self, layout: Layout, epoch: int) -> CatalogUsage:
        """The live generations' IDs and bytes at ``epoch``: one HGETALL of the counters."""
        return CatalogUsage.from_stats(self.redis.hgetall(self.keys.stats), layout.live(epoch))

    def drop(self) -> int:
        """Delete every key of this catalog (after a head reset); the number deleted. Only
        the catalog's own (:attr:`CatalogKeys.patterns`): a Redis sink sharing the server
        keeps its head and markers under the same prefix."""
        keys = [
            key
            for pattern in self.keys.patterns
            for key in self.redis.scan_iter(match=pattern, count=1000)
        ]
        for i in range(0, len(keys), 1000):
            self.redis.unlink(*keys[i : i + 1000])
        return len(keys)

    # -- lookups and marks (executor side) --------------------------------------------

    def lookup(
        self, instance: str, layout: Layout, shard: int, epoch: int, ids: Ids
    ) -> npt.NDArray[np.bool_]:
        """True for every ID the catalog holds in a live generation. Batched, exact.

        Read-only. Raises :class:`CatalogLostError` if the catalog is not ``instance``.
        """
        found = np.zeros(len(ids), dtype=bool)
        for start in range(0, len(ids), self.config.chunk_ids):
            chunk = ids[start : start + self.config.chunk_ids]
            packed = pack_groups(chunk, layout.bucket_bits)
            hit = np.zeros(len(chunk), dtype=bool)
            for gen in layout.live(epoch):
                base = self.keys.bucket_prefix(shard, gen)
                flags = self._call(LUA_LOOKUP, [instance, base, packed.blob, packed.groups])
                hit |= np.frombuffer(flags, dtype=np.uint8) == ord("1")
            unsorted = np.zeros(len(chunk), dtype=bool)
            unsorted[packed.order] = hit
            found[start : start + len(chunk)] = unsorted
        return found

    def mark(
        self, instance: str, layout: Layout, shard: int, epoch: int, ids: Ids, journal: bool = True
    ) -> None:
        """Record IDs as written at ``epoch``. Call only after the sink committed them.

        Marking twice is harmless to lookups (an ID held twice is still held once for them);
        with ``journal`` the IDs are also journaled, so a restart whose head is below
        ``epoch`` rolls them back (:meth:`roll_back_above`).
        """
        if not len(ids):
            return
        gen = layout.gen(epoch)
        base = self.keys.bucket_prefix(shard, gen)
        for start in range(0, len(ids), self.config.chunk_ids):
            chunk = ids[start : start + self.config.chunk_ids]
            packed = pack_groups(chunk, layout.bucket_bits)
            self._call(LUA_MARK, [instance, base, packed.blob, packed.groups, gen], stats=True)
        if journal:
            self.redis.append(self.keys.journal(shard, epoch), np.ascontiguousarray(ids).tobytes())

    def _call(self, source: str, args: Sequence[Any], stats: bool = False) -> bytes:
        """Run a script with the meta hash (and with ``stats``, the stats hash) as keys."""
        import redis

        keys = [self.keys.meta, self.keys.stats] if stats else [self.keys.meta]
        try:
            result: bytes = self._script(source)(keys=keys, args=args)
        except redis.ResponseError as exc:
            if "CATALOG_LOST" in str(exc):
                raise self._lost() from None
            raise
        return result

    # -- Bloom filters -----------------------------------------------------------------

    def load_blooms(
        self, instance: str, layout: Layout, shard: int, gens: Iterable[int], cached: Blooms
    ) -> Blooms:
        """The shard's filters for ``gens``, reusing cached ones whose version is current.

        A filter returned here is complete: the persisted filter is OR-ed before the catalog
        is marked, so it holds every ID the catalog holds for that generation.
        """
        gens = list(gens)
        pipe = self.redis.pipeline(transaction=True)
        pipe.hget(self.keys.meta, "instance")
        for g in gens:
            pipe.get(self.keys.bloom_version(shard, g))
        got = pipe.execute()
        if (got[0] or b"").decode() != instance:
            raise self._lost()
        out: Blooms = {}
        for g, raw_version in zip(gens, got[1:], strict=False):
            version = int(raw_version or 0)
            if g in cached and cached[g][0] == version:
                out[g] = cached[g]
            else:
                out[g] = self._load_bloom(layout, shard, g)
        return out

    def _load_bloom(self, layout: Layout, shard: int, gen: int) -> tuple[int, BloomFilter]:
        """One persisted filter and its version, read together (empty if never written)."""
        pipe = self.redis.pipeline(transaction=True)
        pipe.get(self.keys.bloom_version(shard, gen))
        pipe.get(self.keys.bloom(shard, gen))
        raw_version, data = pipe.execute()
        spec = layout.bloom
        return int(raw_version or 0), spec.load(data) if data else spec.empty()

    def merge_bloom(self, instance: str, shard: int, gen: int, delta: BloomFilter) -> int:
        """OR ``delta`` into the persisted filter atomically; returns the new version.

        Idempotent in content (OR-ing twice changes nothing); the version grows every call.
        Callers merge before they :meth:`mark`, so the filter always covers the catalog.
        """
        bloom, version = self.keys.bloom(shard, gen), self.keys.bloom_version(shard, gen)
        args = [instance, bloom, version, self.keys.tmp(), delta.to_bytes(), gen]
        return int(self._call(LUA_MERGE, args, stats=True))

    # -- driver-side maintenance -------------------------------------------------------

    def roll_back_above(self, layout: Layout, head_epoch: int) -> int:
        """Drop entries marked for epochs above the head (a restart re-runs those epochs).

        Driver only, at (re)start. Deletes every journal it finds, rolled back or not; the
        number of IDs removed from the buckets.
        """
        removed = 0
        for key in self.redis.scan_iter(match=self.keys.journals, count=1000):
            shard, epoch = CatalogKeys.parse_journal(key.decode())
            if epoch > head_epoch:
                blob = self.redis.get(key) or b""
                gen = layout.gen(epoch)
                args = [self.keys.bucket_prefix(shard, gen), blob, layout.bucket_bits, gen]
                removed += int(self._script(LUA_UNMARK)(keys=[self.keys.stats], args=args))
            self.redis.delete(key)
        return removed

    def forget_journals(self, shards: int, epoch: int) -> None:
        """The head passed ``epoch``: its journal is no longer needed for a rollback."""
        self.redis.delete(*[self.keys.journal(s, epoch) for s in range(shards)])

    def expire_before(self, layout: Layout, epoch: int) -> int:
        """Delete whole generations older than the retention window, then their counters;
        returns keys deleted."""
        oldest_live = min(layout.live(epoch))
        deleted = 0
        for gen in range(max(0, oldest_live - 2), oldest_live):
            keys = [self.keys.bloom(s, gen) for s in range(layout.shards)]
            keys += [self.keys.bloom_version(s, gen) for s in range(layout.shards)]
            for s in range(layout.shards):
                keys += [self.keys.bucket(s, gen, b) for b in range(1 << layout.bucket_bits)]
            for i in range(0, len(keys), 10_000):
                deleted += int(self.redis.unlink(*keys[i : i + 10_000]))
        self._forget_counters(oldest_live)
        return deleted

    def _forget_counters(self, oldest_live: int) -> None:
        """Drop the stats of every generation before ``oldest_live`` (after their keys)."""
        names = [
            name
            for name in self.redis.hkeys(self.keys.stats)
            if int(name.partition(b":")[2]) < oldest_live
        ]
        if names:
            self.redis.hdel(self.keys.stats, *names)

    def memory_per_id(self, layout: Layout, epoch: int) -> float | None:
        """Redis bytes per live ID in this catalog (sampled with MEMORY USAGE)."""
        total_bytes = total_ids = 0
        for gen in layout.live(epoch):
            for shard in range(layout.shards):
                for b in range(min(1 << layout.bucket_bits, 64)):
                    key = self.keys.bucket(shard, gen, b)
                    n = int(self.redis.strlen(key)) // 16
                    if n:
                        total_ids += n
                        total_bytes += int(self.redis.memory_usage(key) or 0)
        return total_bytes / total_ids if total_ids else None
