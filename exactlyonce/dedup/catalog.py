"""The Redis catalog of record IDs already written, per (query, sink, shard): its operations.

:class:`RedisCatalog` creates, marks, looks up, rolls back and expires one (query, sink)'s
catalog. What it relies on lives beside it: the settings in :mod:`.config`, the sizing
(generations, buckets) in :mod:`.layout`, the key names in :mod:`.keys` and the Lua scripts in
:mod:`.scripts`. Their names are re-exported here, where callers have always imported them.

All traffic is batched: one Lua call marks or looks up up to 200,000 IDs, grouped by bucket.
Every call checks ``instance`` first, so a Redis that restarted empty is detected (it answers
CATALOG_LOST) instead of answering "never seen" for everything.

The scripts that change the catalog keep per-generation usage counters in each shard's stats
hash, in the same atomic step (see :mod:`.scripts`); :meth:`RedisCatalog.usage` reads them
(one HGETALL per shard, pipelined) and sums them: the IDs the catalog can still recognise and
the Redis memory they take.

Standalone Redis or Redis Cluster: the client (:func:`.config.connect_redis`) is redis-py's
cluster client when the server says it is a cluster. Every script and MULTI touches the keys
of one shard only (one slot); SCANs (drop, journals) run on every master, which redis-py's
cluster ``scan_iter`` does; multi-key DEL/UNLINK are split per slot by the cluster client.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from exactlyonce.dedup.bloom import BloomFilter, BloomSpec, Ids
from exactlyonce.dedup.config import DedupConfig
from exactlyonce.dedup.keys import CatalogKeys, namespace
from exactlyonce.dedup.layout import MAX_PER_CALL, Layout, buckets, pack_groups
from exactlyonce.dedup.scripts import LUA_LOOKUP, LUA_MARK, LUA_MERGE, LUA_MERGE_BITS, LUA_UNMARK
from exactlyonce.errors import CatalogLostError

__all__ = [
    "LUA_LOOKUP",
    "LUA_MARK",
    "LUA_MERGE",
    "LUA_MERGE_BITS",
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
        """A new, empty catalog with a fresh instance id (after loss, or the first start).

        Whatever is left of an earlier catalog is dropped first, so a new instance never
        inherits keys (a cluster may lose one master's shards and keep the others). The shard
        markers are written before meta: a crash in between leaves meta absent or naming
        another instance, which the keeper reads as a lost catalog and creates again.
        """
        if self._leftovers(layout.shards):
            self.drop()
        instance = uuid.uuid4().hex
        pipe = self.redis.pipeline(transaction=False)
        for shard in range(layout.shards):
            pipe.set(self.keys.marker(shard), instance)
            if layout.tracked:
                pipe.hset(self.keys.presence(shard), mapping={"i": instance})
            if layout.indexed:
                pipe.hset(self.keys.journal_index(shard), mapping={"i": instance})
        pipe.execute()
        meta = {"instance": instance, "layout": layout.version, **layout.to_meta()}
        self.redis.hset(self.keys.meta, mapping=meta)
        return instance

    def _leftovers(self, shards: int) -> bool:
        """Whether meta or any shard marker exists (a shard's other keys live beside its
        marker, on the same master, and are lost with it)."""
        return self.redis.exists(self.keys.meta) > 0 or any(
            marker is not None for marker in self.markers(shards)
        )

    def markers(self, shards: int) -> list[bytes | None]:
        """Every shard's instance marker (one pipeline; per master on a cluster)."""
        pipe = self.redis.pipeline(transaction=False)
        for shard in range(shards):
            pipe.get(self.keys.marker(shard))
        return list(pipe.execute())

    def holds_instance(self, instance: str, shards: int) -> bool:
        """Whether meta and every shard marker name ``instance``: false after any loss, also
        of one master of a cluster."""
        current = self.redis.hget(self.keys.meta, "instance")
        if current is None or current.decode() != instance:
            return False
        return all(m is not None and m.decode() == instance for m in self.markers(shards))

    def stats(self, shards: int) -> dict[bytes, bytes]:
        """The shards' usage counters, summed field by field (one HGETALL per shard)."""
        pipe = self.redis.pipeline(transaction=False)
        for shard in range(shards):
            pipe.hgetall(self.keys.stats(shard))
        total: dict[bytes, int] = {}
        for counters in pipe.execute():
            for name, value in counters.items():
                total[name] = total.get(name, 0) + int(value)
        return {name: str(value).encode() for name, value in total.items()}

    def usage(self, layout: Layout, epoch: int) -> CatalogUsage:
        """The live generations' IDs and bytes at ``epoch``, from the shards' counters."""
        return CatalogUsage.from_stats(self.stats(layout.shards), layout.live(epoch))

    def drop(self) -> int:
        """Delete every key of this catalog, in either layout (after a head reset, before a
        new instance); the number deleted. Only the catalog's own (:meth:`CatalogKeys.owns`):
        a Redis sink sharing the server keeps its head and markers under the same prefix."""
        keys = {
            key
            for pattern in self.keys.patterns
            for key in self.redis.scan_iter(match=pattern, count=1000)
            if self.keys.owns(key.decode())
        }
        self.unlink(sorted(keys))
        return len(keys)

    def unlink(self, keys: Sequence[Any]) -> int:
        """UNLINK in batches (split per slot by the cluster client); the number deleted."""
        deleted = 0
        for i in range(0, len(keys), 10_000):
            deleted += int(self.redis.unlink(*keys[i : i + 10_000]))
        return deleted

    # -- lookups and marks (executor side) --------------------------------------------

    def lookup(
        self, instance: str, layout: Layout, shard: int, epoch: int, ids: Ids
    ) -> npt.NDArray[np.bool_]:
        """True for every ID the catalog holds in a live generation. Batched, exact.

        Read-only. Raises :class:`CatalogLostError` if the shard is not ``instance``'s.
        """
        found = np.zeros(len(ids), dtype=bool)
        fixed = [self.keys.marker(shard), self.keys.presence(shard)]
        check = _flag(layout.tracked)
        for start in range(0, len(ids), self.config.chunk_ids):
            chunk = ids[start : start + self.config.chunk_ids]
            packed = pack_groups(chunk, layout.bucket_bits)
            hit = np.zeros(len(chunk), dtype=bool)
            for gen in layout.live(epoch):
                keys = [*fixed, *self._bucket_keys(shard, gen, packed.buckets)]
                args = [instance, packed.blob, packed.bounds, check]
                flags = self._call(LUA_LOOKUP, keys, args)
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
        fixed = [self.keys.marker(shard), self.keys.stats(shard), self.keys.presence(shard)]
        check = _flag(layout.tracked)
        for start in range(0, len(ids), self.config.chunk_ids):
            chunk = ids[start : start + self.config.chunk_ids]
            packed = pack_groups(chunk, layout.bucket_bits)
            keys = fixed + self._bucket_keys(shard, gen, packed.buckets)
            self._call(LUA_MARK, keys, [instance, packed.blob, packed.bounds, gen, check])
        if journal:
            self._journal(layout, shard, epoch, ids)

    def _journal(self, layout: Layout, shard: int, epoch: int, ids: Ids) -> None:
        """Append ``ids`` to the epoch's journal, recorded in the presence hash and the
        journal index in the same MULTI (one slot)."""
        pipe = self.redis.pipeline(transaction=True)
        pipe.append(self.keys.journal(shard, epoch), np.ascontiguousarray(ids).tobytes())
        if layout.tracked:
            pipe.hset(self.keys.presence(shard), mapping={f"j:{epoch}": "1"})
        if layout.indexed:
            pipe.hset(self.keys.journal_index(shard), mapping={str(epoch): "1"})
        pipe.execute()

    def _bucket_keys(self, shard: int, gen: int, numbers: list[int]) -> list[Any]:
        base = self.keys.bucket_prefix(shard, gen).encode()
        return [base + b"%x" % n for n in numbers]

    def call(self, source: str, keys: list[Any], args: Sequence[Any]) -> bytes:
        """Run a script of :mod:`.scripts` on one shard's keys (see :meth:`_call`)."""
        return self._call(source, keys, args)

    def _call(self, source: str, keys: list[Any], args: Sequence[Any]) -> bytes:
        """Run a script on one shard's keys; CATALOG_LOST becomes :class:`CatalogLostError`."""
        import redis

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
        pipe = self.redis.pipeline(transaction=True)  # one shard: one slot
        pipe.get(self.keys.marker(shard))
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
                out[g] = self._load_bloom(instance, layout, shard, g)
        return out

    def _load_bloom(
        self, instance: str, layout: Layout, shard: int, gen: int
    ) -> tuple[int, BloomFilter]:
        """One persisted filter and its version, read together (empty if never written).
        A filter the presence record names that is gone is a partial loss (:meth:`_evicted`)."""
        pipe = self.redis.pipeline(transaction=True)
        pipe.get(self.keys.bloom_version(shard, gen))
        pipe.get(self.keys.bloom(shard, gen))
        pipe.hget(self.keys.presence(shard), "i")
        pipe.hget(self.keys.presence(shard), f"b:{gen}")
        raw_version, data, owner, recorded = pipe.execute()
        if layout.tracked and (owner != instance.encode() or (recorded and data is None)):
            raise self._evicted(shard)
        spec = layout.bloom
        return int(raw_version or 0), spec.load(data) if data else spec.empty()

    def _evicted(self, shard: int) -> CatalogLostError:
        """Part of the shard's keys are gone: delete its marker, so that every reader (the
        keeper's ``lost()`` too) sees the shard lost, as the scripts do."""
        self.redis.delete(self.keys.marker(shard))
        return CatalogLostError(
            f"catalog {self.prefix}: shard {shard} lost some of its keys (evicted? the "
            "catalog's Redis needs maxmemory-policy noeviction or a volatile-* one)"
        )

    def merge_bloom(
        self, instance: str, shard: int, gen: int, delta: BloomFilter, tracked: bool = True
    ) -> int:
        """OR ``delta`` into the persisted filter atomically; returns the new version.

        Idempotent in content (OR-ing twice changes nothing); the version grows every call.
        Callers merge before they :meth:`mark`, so the filter always covers the catalog.
        """
        keys = [self.keys.marker(shard), self.keys.stats(shard), self.keys.bloom(shard, gen)]
        keys += [self.keys.bloom_version(shard, gen), self.keys.tmp(shard)]
        keys.append(self.keys.presence(shard))
        args = [instance, delta.to_bytes(), gen, _flag(tracked)]
        return int(self._call(LUA_MERGE, keys, args))

    def merge_bloom_bits(
        self,
        instance: str,
        shard: int,
        gen: int,
        bits: npt.NDArray[np.uint64],
        spec: BloomSpec,
        tracked: bool = True,
    ) -> int:
        """:meth:`merge_bloom` of a delta of ``spec`` holding exactly ``bits`` (a numpy
        filter's bit numbers, :class:`~.bloom.Positions`), sent as the bits alone: the same
        persisted bytes and version, without sending a whole filter for a few set bits."""
        keys = [self.keys.marker(shard), self.keys.stats(shard), self.keys.bloom(shard, gen)]
        keys += [self.keys.bloom_version(shard, gen), self.keys.tmp(shard)]
        keys.append(self.keys.presence(shard))
        offsets = redis_bit_offsets(bits).astype("<u4").tobytes()
        args = [instance, offsets, gen, _flag(tracked), spec.bits // 8]
        return int(self._call(LUA_MERGE_BITS, keys, args))

    # -- driver-side maintenance -------------------------------------------------------

    def roll_back_above(self, layout: Layout, head_epoch: int) -> int:
        """Drop entries marked for epochs above the head (a restart re-runs those epochs).

        Driver only, at (re)start. Deletes every journal it finds, rolled back or not; the
        number of IDs removed from the buckets. A catalog with presence records finds its
        journals through them (:meth:`_named_journals`): in layout 3 each shard's journal
        index names them, so a restart does not grow with the catalog; in layout 2, or when
        the index is gone, a match on the shard's presence record (a walk of a field per
        bucket). One made before presence records, or whose record is gone or another
        instance's (a partial loss its next script reports), SCANs every master for them.
        """
        removed = 0
        named = self._named_journals(layout, head_epoch) if layout.tracked else None
        if named is not None:
            found_journals = named
        else:
            found_journals = set()
            for raw in self.redis.scan_iter(match=self.keys.journals, count=1000):
                found = self.keys.parse_journal(raw.decode())
                if found is not None:
                    found_journals.add(found)
        for shard, epoch in sorted(found_journals):
            key = self.keys.journal(shard, epoch)
            if epoch > head_epoch:
                blob = self.redis.get(key) or b""
                removed += self._unmark(layout, shard, layout.gen(epoch), blob)
            self._forget_journal(shard, epoch)
        return removed

    def _forget_journal(self, shard: int, epoch: int) -> None:
        pipe = self.redis.pipeline(transaction=True)  # one shard: one slot
        pipe.delete(self.keys.journal(shard, epoch))
        pipe.hdel(self.keys.presence(shard), f"j:{epoch}")
        pipe.hdel(self.keys.journal_index(shard), str(epoch))
        pipe.execute()

    def _named_journals(self, layout: Layout, head_epoch: int) -> set[tuple[int, int]] | None:
        """The (shard, epoch) of every journal the shards' presence records name and that
        exists; None when a shard's record is gone or names another instance than its marker
        (the caller SCANs). A journal above the head a record names that is gone is a partial
        loss (:meth:`_evicted`): without it a rollback would leave IDs of an uncommitted
        epoch marked (read as duplicates)."""
        named: list[tuple[int, int]] = []
        for shard in range(layout.shards):
            presence = self.keys.presence(shard)
            pipe = self.redis.pipeline(transaction=True)  # one shard: one slot
            pipe.get(self.keys.marker(shard))
            pipe.hget(presence, "i")
            if layout.indexed:
                pipe.hgetall(self.keys.journal_index(shard))
            marker, owner, *index = pipe.execute()
            if owner is None or owner != marker:
                return None
            epochs = _indexed_epochs(index[0], marker) if index else None
            if epochs is None:
                epochs = self._presence_journals(presence)
            named += [(shard, epoch) for epoch in epochs]
        if not named:
            return set()
        pipe = self.redis.pipeline(transaction=False)
        for shard, epoch in named:
            pipe.exists(self.keys.journal(shard, epoch))
        found: set[tuple[int, int]] = set()
        for (shard, epoch), exists in zip(named, pipe.execute(), strict=True):
            if exists:
                found.add((shard, epoch))
            elif epoch > head_epoch:
                raise self._evicted(shard)
        return found

    def _unmark(self, layout: Layout, shard: int, gen: int, blob: bytes) -> int:
        ids = np.frombuffer(blob, dtype=np.uint8).reshape(-1, 16)
        removed = 0
        for start in range(0, len(ids), self.config.chunk_ids):
            packed = pack_groups(ids[start : start + self.config.chunk_ids], layout.bucket_bits)
            keys = [self.keys.stats(shard), *self._bucket_keys(shard, gen, packed.buckets)]
            args = [packed.blob, packed.bounds, gen]
            removed += int(self._script(LUA_UNMARK)(keys=keys, args=args))
        return removed

    def _presence_journals(self, presence: str) -> list[int]:
        """The epochs of the journals a presence record names: a match on every field (the
        walk layout 3's journal index saves)."""
        epochs = []
        for name in self.redis.hscan_iter(presence, match="j:*", count=10_000):
            field = name[0] if isinstance(name, tuple) else name
            epochs.append(int(field.decode().partition(":")[2]))
        return epochs

    def forget_journals(self, shards: int, epoch: int) -> None:
        """The head passed ``epoch``: its journal is no longer needed for a rollback."""
        for shard in range(shards):
            self._forget_journal(shard, epoch)

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
            deleted += self.unlink(keys)
            self._forget_presence(layout, gen)
        self._forget_counters(layout.shards, oldest_live)
        return deleted

    def _forget_presence(self, layout: Layout, gen: int) -> None:
        """Drop an expired generation's fields from every shard's presence record."""
        fields = [f"b:{gen}", *(f"c:{gen}:{b:x}" for b in range(1 << layout.bucket_bits))]
        for shard in range(layout.shards):
            self.redis.hdel(self.keys.presence(shard), *fields)

    def _forget_counters(self, shards: int, oldest_live: int) -> None:
        """Drop every shard's stats of the generations before ``oldest_live`` (after their
        keys)."""
        for shard in range(shards):
            key = self.keys.stats(shard)
            names = [
                name for name in self.redis.hkeys(key) if int(name.partition(b":")[2]) < oldest_live
            ]
            if names:
                self.redis.hdel(key, *names)

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


def redis_bit_offsets(bits: npt.NDArray[np.uint64]) -> npt.NDArray[np.uint64]:
    """A numpy filter's bit numbers (bit ``n % 8`` of byte ``n // 8``, least significant
    first) as Redis's SETBIT offsets (most significant first), unique and sorted."""
    unique = np.unique(np.asarray(bits, dtype=np.uint64).ravel())
    seven = np.uint64(7)
    offsets: npt.NDArray[np.uint64] = (unique & ~seven) | (seven - (unique & seven))
    return offsets


def _indexed_epochs(index: dict[bytes, bytes], marker: bytes) -> list[int] | None:
    """The epochs a shard's journal index names; None when it cannot be trusted: gone
    (evicted, or never written) or another instance's."""
    if index.get(b"i") != marker:
        return None
    return [int(field) for field in index if field != b"i"]


def _flag(on: bool) -> str:
    return "1" if on else "0"
