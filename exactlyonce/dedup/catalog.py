"""The Redis catalog of record IDs already written, per (query, sink, shard).

Layout (all keys share one ``{hash tag}``, so a Redis Cluster keeps a query's keys together):

``<p>:meta``                         HASH: ``instance`` (random, new whenever the catalog is
                                     created), and the sizing fixed at creation
``<p>:c:<shard>:<gen>:<bucket>``     STRING of 16-byte IDs, appended to. A bucket holds about
                                     64-128 IDs (sized from ``expected_ids``), so a mark is one
                                     APPEND per bucket and a lookup scans ~2 KB: about 17 bytes
                                     per live ID (a SET costs 80, a listpack HASH 25-45)
``<p>:j:<shard>:<epoch>``            the IDs first marked in an epoch the head has not passed
                                     yet (a journal), to roll them back on restart
``<p>:b:<shard>:<gen>`` / ``:bv:``    the shard's Bloom filter for a generation, and its version

Generations: ``gen = epoch // gen_epochs``; lookups check every live generation, and a whole
generation is deleted once all of its epochs are older than ``retention_epochs``. So an ID is
remembered for at least ``retention_epochs`` epochs. The rule users must keep: the source must
never replay a record older than that (Kafka retention, file source cleanup, upstream retries).

All traffic is batched: one Lua call marks or looks up up to 200,000 IDs, grouped by bucket.
Every call checks ``instance`` first, so a Redis that restarted empty is detected (it answers
CATALOG_LOST) instead of answering "never seen" for everything.
"""

from __future__ import annotations

import hashlib
import math
import re
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from exactlyonce.dedup.bloom import Backend, BloomFilter, BloomSpec, Ids
from exactlyonce.errors import CatalogLostError, ConfigError

# ARGV[4] packs the groups, three little-endian uint32 each: bucket, first and end index (into
# the blob of IDs sorted by bucket). One packed argument instead of three per bucket: redis-py
# encodes every argument in Python, which cost more than the script (47 ms per 10k IDs).
LUA_MARK = """
if redis.call('HGET', KEYS[1], 'instance') ~= ARGV[1] then return redis.error_reply('CATALOG_LOST') end
local prefix = ARGV[2]; local blob = ARGV[3]; local groups = ARGV[4]
for j = 1, #groups, 12 do
  local b, s, e = struct.unpack('<I4I4I4', groups, j)
  redis.call('APPEND', prefix .. string.format('%x', b), string.sub(blob, s * 16 + 1, e * 16))
end
return 1
"""

# A bucket is a string of 16-byte IDs; a match counts only at a multiple of 16.
LUA_FIND = """
local function holds(bucket, id)
  local init = 1
  while true do
    local at = string.find(bucket, id, init, true)
    if not at then return false end
    if (at - 1) % 16 == 0 then return true end
    init = at + 1
  end
end
"""

LUA_LOOKUP = (
    LUA_FIND
    + """
if redis.call('HGET', KEYS[1], 'instance') ~= ARGV[1] then return redis.error_reply('CATALOG_LOST') end
local prefix = ARGV[2]; local blob = ARGV[3]; local groups = ARGV[4]; local out = {}
for j = 1, #groups, 12 do
  local b, s, e = struct.unpack('<I4I4I4', groups, j)
  local bucket = redis.call('GET', prefix .. string.format('%x', b))
  for k = s + 1, e do
    out[k] = (bucket and holds(bucket, string.sub(blob, k * 16 - 15, k * 16))) and '1' or '0'
  end
end
return table.concat(out)
"""
)

LUA_UNMARK = """
local prefix = ARGV[1]; local blob = ARGV[2]; local bits = tonumber(ARGV[3])
local drop = {}; local keys = {}
for j = 1, #blob, 16 do
  local id = string.sub(blob, j, j + 15)
  local b = math.floor((string.byte(id, 1) * 256 + string.byte(id, 2)) / (2 ^ (16 - bits)))
  local key = prefix .. string.format('%x', b)
  if not drop[key] then drop[key] = {}; keys[#keys + 1] = key end
  drop[key][id] = true
end
local removed = 0
for _, key in ipairs(keys) do
  local bucket = redis.call('GET', key)
  if bucket then
    local kept = {}
    for j = 1, #bucket, 16 do
      local id = string.sub(bucket, j, j + 15)
      if drop[key][id] then removed = removed + 1 else kept[#kept + 1] = id end
    end
    redis.call('SET', key, table.concat(kept))
  end
end
return removed
"""


MAX_PER_CALL = 2000  # IDs of one bucket per script step


@dataclass(frozen=True)
class DedupConfig:
    """Dedup settings. ``expected_ids`` is per retention window, over all shards.

    ``connect`` is the one seam to the catalog's Redis: it gets ``redis_url`` and returns a
    redis-py-like client. None (the default) is ``redis.Redis.from_url(url,
    socket_timeout=30)``. :mod:`exactlyonce.testing` passes an in-memory stand-in here; a
    real deployment leaves it alone (it must be picklable to reach Spark's executors).
    """

    redis_url: str
    expected_ids: int = 1_000_000
    fp_rate: float = 0.001
    retention_epochs: int = 1000
    bloom_backend: Backend = "numpy"
    on_catalog_loss: str = "rebuild"  # or "fail"
    chunk_ids: int = 200_000
    connect: Callable[[str], Any] | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        if not self.redis_url.startswith(("redis://", "rediss://", "unix://")):
            raise ConfigError("redis_url", "must be a redis://, rediss:// or unix:// URL")
        if self.retention_epochs < 1:
            raise ConfigError("retention_epochs", "must be at least 1")
        if self.on_catalog_loss not in ("rebuild", "fail"):
            raise ConfigError("on_catalog_loss", "must be 'rebuild' or 'fail'")
        BloomSpec(max(1, self.expected_ids), self.fp_rate, self.bloom_backend)

    def __repr__(self) -> str:
        return f"DedupConfig(expected_ids={self.expected_ids}, fp_rate={self.fp_rate}, ...)"


@dataclass(frozen=True)
class Layout:
    """Sizing fixed when the catalog is created; stored in meta and reused after restarts."""

    shards: int
    gen_epochs: int
    live_gens: int
    bucket_bits: int
    bloom: BloomSpec

    @classmethod
    def plan(cls, config: DedupConfig, shards: int) -> Layout:
        gen_epochs = max(1, math.ceil(config.retention_epochs / 4))
        live_gens = math.ceil(config.retention_epochs / gen_epochs) + 1
        per_gen = math.ceil(config.expected_ids * gen_epochs / config.retention_epochs)
        per_shard = max(64, math.ceil(per_gen / shards))
        bits = min(16, max(0, math.ceil(math.log2(per_shard / 64))))
        return cls(
            shards,
            gen_epochs,
            live_gens,
            bits,
            BloomSpec(per_shard, config.fp_rate, config.bloom_backend),
        )

    def gen(self, epoch: int) -> int:
        return epoch // self.gen_epochs

    def live(self, epoch: int) -> list[int]:
        current = self.gen(epoch)
        return [g for g in range(current - self.live_gens + 1, current + 1) if g >= 0]

    def to_meta(self) -> dict[str, str]:
        return {
            "shards": str(self.shards),
            "gen_epochs": str(self.gen_epochs),
            "live_gens": str(self.live_gens),
            "bucket_bits": str(self.bucket_bits),
            "bloom_capacity": str(self.bloom.capacity),
            "fp_rate": repr(self.bloom.fp_rate),
            "bloom_backend": self.bloom.backend,
        }

    @classmethod
    def from_meta(cls, meta: dict[str, str]) -> Layout:
        spec = BloomSpec(int(meta["bloom_capacity"]), float(meta["fp_rate"]), meta["bloom_backend"])  # type: ignore[arg-type]
        return cls(
            int(meta["shards"]),
            int(meta["gen_epochs"]),
            int(meta["live_gens"]),
            int(meta["bucket_bits"]),
            spec,
        )


def namespace(query_name: str, sink_name: str) -> str:
    digest = hashlib.sha1(f"{query_name}\0{sink_name}".encode()).hexdigest()[:10]
    return f"eo:{{{query_name}:{digest}}}"


def buckets(ids: Ids, bits: int) -> npt.NDArray[np.int64]:
    first = (ids[:, 0].astype(np.int64) << 8) | ids[:, 1]
    return first >> (16 - bits)


def _connect_redis(url: str) -> Any:
    """The catalog's client unless ``DedupConfig.connect`` says otherwise: redis-py."""
    import redis

    return redis.Redis.from_url(url, socket_timeout=30)


class RedisCatalog:
    """One (query, sink)'s catalog. Cheap to build; opens its Redis connection lazily."""

    def __init__(self, config: DedupConfig, query_name: str, sink_name: str) -> None:
        self.config = config
        self.prefix = namespace(query_name, sink_name)
        self._redis: Any = None
        self._scripts: dict[str, Any] = {}

    @property
    def redis(self) -> Any:
        if self._redis is None:
            self._redis = (self.config.connect or _connect_redis)(self.config.redis_url)
        return self._redis

    def _script(self, source: str) -> Any:
        if source not in self._scripts:
            self._scripts[source] = self.redis.register_script(source)
        return self._scripts[source]

    def close(self) -> None:
        if self._redis is not None:
            self._redis.close()
            self._redis = None

    # -- keys ------------------------------------------------------------------------

    @property
    def meta_key(self) -> str:
        return f"{self.prefix}:meta"

    def bucket_prefix(self, shard: int, gen: int) -> str:
        return f"{self.prefix}:c:{shard}:{gen}:"

    def journal_key(self, shard: int, epoch: int) -> str:
        return f"{self.prefix}:j:{shard}:{epoch}"

    def bloom_key(self, shard: int, gen: int) -> str:
        return f"{self.prefix}:b:{shard}:{gen}"

    def bloom_version_key(self, shard: int, gen: int) -> str:
        return f"{self.prefix}:bv:{shard}:{gen}"

    # -- meta --------------------------------------------------------------------------

    def meta(self) -> dict[str, str]:
        raw = self.redis.hgetall(self.meta_key)
        return {k.decode(): v.decode() for k, v in raw.items()}

    def create(self, layout: Layout) -> str:
        """A new, empty catalog with a fresh instance id (after loss, or the first start)."""
        instance = uuid.uuid4().hex
        self.redis.hset(self.meta_key, mapping={"instance": instance, **layout.to_meta()})
        return instance

    def drop(self) -> int:
        """Delete every key of this catalog (after a head reset); the number deleted."""
        pattern = re.sub(r"([*?\[\]\\])", r"\\\1", self.prefix) + ":*"
        keys = list(self.redis.scan_iter(match=pattern, count=1000))
        for i in range(0, len(keys), 1000):
            self.redis.unlink(*keys[i : i + 1000])
        return len(keys)

    # -- lookups and marks (executor side) --------------------------------------------

    def _groups(self, ids: Ids, bits: int) -> tuple[bytes, bytes]:
        """The IDs sorted by bucket (one blob) and their groups packed for the scripts:
        (bucket, start, end) as little-endian uint32, at most MAX_PER_CALL IDs per group."""
        keys = buckets(ids, bits)
        order = np.argsort(keys, kind="stable")
        sorted_keys = keys[order]
        cuts = np.flatnonzero(np.diff(sorted_keys)) + 1
        starts = np.concatenate(([0], cuts)).astype(np.int64)
        ends = np.concatenate((cuts, [len(ids)])).astype(np.int64)
        if (ends - starts > MAX_PER_CALL).any():  # split oversized groups (rare)
            pieces = [
                (lo, min(lo + MAX_PER_CALL, int(e)))
                for s, e in zip(starts, ends, strict=True)
                for lo in range(int(s), int(e), MAX_PER_CALL)
            ]
            starts = np.array([lo for lo, _ in pieces], dtype=np.int64)
            ends = np.array([hi for _, hi in pieces], dtype=np.int64)
        groups = np.column_stack((sorted_keys[starts], starts, ends)).astype("<u4")
        self._last_order = order
        return np.ascontiguousarray(ids[order]).tobytes(), groups.tobytes()

    def lookup(
        self, instance: str, layout: Layout, shard: int, epoch: int, ids: Ids
    ) -> npt.NDArray[np.bool_]:
        """True for every ID the catalog holds in a live generation. Batched, exact."""
        found = np.zeros(len(ids), dtype=bool)
        for start in range(0, len(ids), self.config.chunk_ids):
            chunk = ids[start : start + self.config.chunk_ids]
            blob, groups = self._groups(chunk, layout.bucket_bits)
            order = self._last_order
            hit = np.zeros(len(chunk), dtype=bool)
            for gen in layout.live(epoch):
                base = self.bucket_prefix(shard, gen)
                flags = self._call(LUA_LOOKUP, [instance, base, blob, groups])
                hit |= np.frombuffer(flags, dtype=np.uint8) == ord("1")
            unsorted = np.zeros(len(chunk), dtype=bool)
            unsorted[order] = hit
            found[start : start + len(chunk)] = unsorted
        return found

    def mark(
        self, instance: str, layout: Layout, shard: int, epoch: int, ids: Ids, journal: bool = True
    ) -> None:
        """Record IDs as written at ``epoch``. Call only after the sink committed them."""
        if not len(ids):
            return
        base = self.bucket_prefix(shard, layout.gen(epoch))
        for start in range(0, len(ids), self.config.chunk_ids):
            chunk = ids[start : start + self.config.chunk_ids]
            blob, groups = self._groups(chunk, layout.bucket_bits)
            self._call(LUA_MARK, [instance, base, blob, groups])
        if journal:
            self.redis.append(self.journal_key(shard, epoch), np.ascontiguousarray(ids).tobytes())

    def _call(self, source: str, args: Sequence[Any]) -> bytes:
        import redis

        try:
            result: bytes = self._script(source)(keys=[self.meta_key], args=args)
        except redis.ResponseError as exc:
            if "CATALOG_LOST" in str(exc):
                raise CatalogLostError(
                    f"catalog {self.prefix} was lost (Redis restarted empty?)"
                ) from None
            raise
        return result

    # -- Bloom filters -----------------------------------------------------------------

    def load_blooms(
        self,
        instance: str,
        layout: Layout,
        shard: int,
        gens: Iterable[int],
        cached: dict[int, tuple[int, BloomFilter]],
    ) -> dict[int, tuple[int, BloomFilter]]:
        """The shard's filters for ``gens``, reusing cached ones whose version is current.

        A filter returned here is complete: the persisted filter is OR-ed before the catalog
        is marked, so it holds every ID the catalog holds for that generation.
        """
        gens = list(gens)
        pipe = self.redis.pipeline(transaction=True)
        pipe.hget(self.meta_key, "instance")
        for g in gens:
            pipe.get(self.bloom_version_key(shard, g))
        got = pipe.execute()
        if (got[0] or b"").decode() != instance:
            raise CatalogLostError(f"catalog {self.prefix} was lost (Redis restarted empty?)")
        out: dict[int, tuple[int, BloomFilter]] = {}
        for g, raw_version in zip(gens, got[1:], strict=False):
            version = int(raw_version or 0)
            if g in cached and cached[g][0] == version:
                out[g] = cached[g]
                continue
            pipe = self.redis.pipeline(transaction=True)
            pipe.get(self.bloom_version_key(shard, g))
            pipe.get(self.bloom_key(shard, g))
            raw_version, data = pipe.execute()
            spec = layout.bloom
            out[g] = (int(raw_version or 0), spec.load(data) if data else spec.empty())
        return out

    def merge_bloom(self, instance: str, shard: int, gen: int, delta: BloomFilter) -> int:
        """OR ``delta`` into the persisted filter atomically; returns the new version."""
        tmp = f"{self.prefix}:tmp:{uuid.uuid4().hex}"
        pipe = self.redis.pipeline(transaction=True)
        pipe.hget(self.meta_key, "instance")
        pipe.set(tmp, delta.to_bytes())
        pipe.bitop("OR", self.bloom_key(shard, gen), self.bloom_key(shard, gen), tmp)
        pipe.delete(tmp)
        pipe.incr(self.bloom_version_key(shard, gen))
        got = pipe.execute()
        if (got[0] or b"").decode() != instance:
            raise CatalogLostError(f"catalog {self.prefix} was lost (Redis restarted empty?)")
        return int(got[-1])

    # -- driver-side maintenance -------------------------------------------------------

    def roll_back_above(self, layout: Layout, head_epoch: int) -> int:
        """Drop entries marked for epochs above the head (a restart re-runs those epochs)."""
        removed = 0
        for key in self.redis.scan_iter(match=f"{self.prefix}:j:*", count=1000):
            _, _, shard, epoch = key.decode().rsplit(":", 3)
            if int(epoch) > head_epoch:
                blob = self.redis.get(key) or b""
                removed += int(
                    self._script(LUA_UNMARK)(
                        keys=[],
                        args=[
                            self.bucket_prefix(int(shard), layout.gen(int(epoch))),
                            blob,
                            layout.bucket_bits,
                        ],
                    )
                )
            self.redis.delete(key)
        return removed

    def forget_journals(self, shards: int, epoch: int) -> None:
        """The head passed ``epoch``: its journal is no longer needed for a rollback."""
        self.redis.delete(*[self.journal_key(s, epoch) for s in range(shards)])

    def expire_before(self, layout: Layout, epoch: int) -> int:
        """Delete whole generations older than the retention window; returns keys deleted."""
        oldest_live = min(layout.live(epoch))
        deleted = 0
        for gen in range(max(0, oldest_live - 2), oldest_live):
            keys = [self.bloom_key(s, gen) for s in range(layout.shards)]
            keys += [self.bloom_version_key(s, gen) for s in range(layout.shards)]
            for s in range(layout.shards):
                base = self.bucket_prefix(s, gen)
                keys += [f"{base}{b:x}" for b in range(1 << layout.bucket_bits)]
            for i in range(0, len(keys), 10_000):
                deleted += int(self.redis.unlink(*keys[i : i + 10_000]))
        return deleted

    def memory_per_id(self, layout: Layout, epoch: int) -> float | None:
        """Redis bytes per live ID in this catalog (sampled with MEMORY USAGE)."""
        total_bytes = total_ids = 0
        for gen in layout.live(epoch):
            for shard in range(layout.shards):
                base = self.bucket_prefix(shard, gen)
                for b in range(min(1 << layout.bucket_bits, 64)):
                    key = f"{base}{b:x}"
                    n = int(self.redis.strlen(key)) // 16
                    if n:
                        total_ids += n
                        total_bytes += int(self.redis.memory_usage(key) or 0)
        return total_bytes / total_ids if total_ids else None
