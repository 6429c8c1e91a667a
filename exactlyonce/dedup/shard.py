"""Task-side dedup: what one executor task does with its shard's record IDs.

Per Arrow batch, :meth:`TaskDedup.keep` answers which records are new:

1. repeats inside the task are dropped (all copies of an ID are in one task: sharded by ID);
2. the shard's Bloom filters (every live generation) answer "no" or "maybe". They come from
   Redis at the version the catalog has now, so they are complete (invariant 3);
3. every "maybe" is confirmed in the catalog, in batches (invariant 2: a hit is only a hint).

A worker with no filter of the shard cached (a fresh worker after a restart) skips step 2 for
as long as asking the catalog about every ID costs less than loading the filters: up to
``filter bytes / LOOKUP_BYTES`` IDs per shard (:meth:`TaskDedup._skips_filter`; 8,775 at a
10M-ID catalog, whose five live filters per shard are 45 MB). Those IDs are looked up exactly
(invariant 3: "or skip the filter"); past that count the filters are loaded. A restart's first
small epoch then no longer pays a load that grows with the catalog.

On the Spark data source path an append-only sink also claims the IDs that pass for its
Spark partition (:mod:`.claims`, :meth:`TaskDedup.claim_as`): an ID another partition of the
epoch claimed is dropped like a duplicate.

After the sink committed the task's transaction, :meth:`TaskDedup.after_commit` ORs the new
IDs into the persisted filter (as a delta filter, or as their bit numbers when they are few:
the same bytes), then marks them in the catalog (invariant 1: mark after commit; filter
before catalog, so the filter always holds what the catalog holds).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from exactlyonce.dedup.bloom import BloomFilter, BloomSpec, Ids, Positions
from exactlyonce.dedup.catalog import RedisCatalog
from exactlyonce.dedup.claims import PartitionClaims
from exactlyonce.dedup.config import DedupConfig
from exactlyonce.dedup.layout import Layout
from exactlyonce.dedup.seen import SeenIds

# Filters survive between tasks in a reused Python worker: (prefix, instance, shard) -> gens.
_FILTER_CACHE: dict[tuple[str, str, int], dict[int, tuple[int, BloomFilter]]] = {}

# Bytes of one shard's filter that cost about as much to load as one ID's exact lookup in one
# live generation (10M-ID catalog, local Redis: 45 MB of filters in 0.35 s; 5,000 IDs looked
# up in five generations in 0.25 s, so ~1,300 bytes; rounded down, in favour of the filter).
LOOKUP_BYTES = 1024

# After the commit, a shard's new IDs are OR-ed into its persisted filter as their bit numbers
# (4 bytes each on the wire) while those take less than 1/SPARSE_BYTES of the filter's bytes,
# else as a whole delta filter: at 10M expected IDs, 500 new IDs are 70 KB of bit numbers
# instead of a 9 MB filter built, sent and OR-ed (0.2 s per task on a loaded machine).
SPARSE_BYTES = 16


@dataclass(frozen=True)
class DedupPlan:
    """What the driver hands each task: the config and the catalog instance it checked."""

    config: DedupConfig
    query_name: str
    sink_name: str
    instance: str
    layout: Layout


@dataclass
class DedupStats:
    ids_checked: int = 0
    task_repeats: int = 0
    bloom_negatives: int = 0
    catalog_lookups: int = 0
    catalog_duplicates: int = 0
    bloom_false_positives: int = 0
    claimed_elsewhere: int = 0  # IDs another Spark partition of the epoch writes


@dataclass
class TaskDedup:
    plan: DedupPlan
    epoch: int
    stats: DedupStats = field(default_factory=DedupStats)
    _catalog: RedisCatalog | None = None
    _seen: SeenIds = field(default_factory=SeenIds)
    _new: dict[int, list[tuple[Ids, Positions | None]]] = field(default_factory=dict)
    _recommitted: dict[int, list[Ids]] = field(default_factory=dict)
    _filters: dict[int, dict[int, tuple[int, BloomFilter]]] = field(default_factory=dict)
    _unfiltered: dict[int, int] = field(default_factory=dict)  # shard -> IDs looked up unfiltered
    claims: PartitionClaims | None = None
    take_claims: bool = True  # False: ask only (the partition committed in an earlier attempt)

    @property
    def catalog(self) -> RedisCatalog:
        if self._catalog is None:
            self._catalog = RedisCatalog(
                self.plan.config, self.plan.query_name, self.plan.sink_name
            )
        return self._catalog

    def claim_as(self, partition: int, fingerprint: str, take: bool) -> str:
        """Claim this task's IDs for (epoch, Spark ``partition``) from now on; register the
        fingerprint of its input first. Returns the fingerprint registered for the partition
        (another one: an earlier attempt got other rows, and nothing may be claimed)."""
        claims = PartitionClaims(self.catalog, self.plan.instance, self.epoch, partition)
        found = claims.register(fingerprint)
        if found == fingerprint:
            self.claims, self.take_claims = claims, take
        return found

    def close(self) -> None:
        if self._catalog is not None:
            self._catalog.close()

    # -- checking ----------------------------------------------------------------------

    def keep(self, shards: npt.NDArray[np.int64], ids: Ids) -> npt.NDArray[np.bool_]:
        """True for each record to write; False for a repeat or an ID the catalog holds."""
        self.stats.ids_checked += len(ids)
        keep = self._first_in_task(ids)
        # The Bloom bits of every ID, once: for each live filter now, for the delta later.
        at = self.plan.layout.bloom.positions(ids)
        for shard in np.unique(shards[keep]):
            rows = np.flatnonzero(keep & (shards == shard))
            seen = self._in_catalog(int(shard), ids[rows], _take(at, rows))
            keep[rows[seen]] = False
        if self.claims is not None:
            self._claim(shards, ids, keep)
        for shard in np.unique(shards[keep]):
            rows = np.flatnonzero(keep & (shards == shard))
            self._new.setdefault(int(shard), []).append((ids[rows], _take(at, rows)))
        return keep

    def _claim(self, shards: npt.NDArray[np.int64], ids: Ids, keep: npt.NDArray[np.bool_]) -> None:
        """Drop (in ``keep``) the IDs another Spark partition of the epoch writes."""
        assert self.claims is not None
        for shard in np.unique(shards[keep]):
            rows = np.flatnonzero(keep & (shards == shard))
            mine = self.claims.claim(int(shard), ids[rows], self.take_claims)
            keep[rows[~mine]] = False
            self.stats.claimed_elsewhere += int((~mine).sum())

    def _first_in_task(self, ids: Ids) -> npt.NDArray[np.bool_]:
        """True for the first of each ID in this task (:class:`~.seen.SeenIds`)."""
        keep = np.zeros(len(ids), dtype=bool)
        keep[self._seen.first(ids)] = True
        self.stats.task_repeats += len(ids) - int(keep.sum())
        return keep

    def _in_catalog(
        self, shard: int, ids: Ids, at: Positions | None = None
    ) -> npt.NDArray[np.bool_]:
        unfiltered = self._skips_filter(shard, len(ids))
        if unfiltered:
            maybe = np.ones(len(ids), dtype=bool)  # every ID asked of the catalog, exactly
        else:
            maybe = np.zeros(len(ids), dtype=bool)
            for _, bloom in self._blooms(shard).values():
                maybe |= bloom.contains(ids, at)
            self.stats.bloom_negatives += len(ids) - int(maybe.sum())
        found = np.zeros(len(ids), dtype=bool)
        if maybe.any():
            rows = np.flatnonzero(maybe)
            p = self.plan
            hit = self.catalog.lookup(p.instance, p.layout, shard, self.epoch, ids[rows])
            found[rows] = hit
            self.stats.catalog_lookups += len(rows)
            self.stats.catalog_duplicates += int(hit.sum())
            if not unfiltered:
                self.stats.bloom_false_positives += len(rows) - int(hit.sum())
        return found

    def _skips_filter(self, shard: int, count: int) -> bool:
        """Whether ``count`` more IDs of ``shard`` are looked up in the catalog without its
        filters: none is loaded or cached in this worker, and the IDs so looked up in this
        task stay within what loading them would cost (``filter bytes / LOOKUP_BYTES``). At
        most that load's cost is spent before the filters are loaded after all."""
        if shard in self._filters or (self.catalog.prefix, self.plan.instance, shard) in (
            _FILTER_CACHE
        ):
            return False
        budget = self.plan.layout.bloom.bits // 8 // LOOKUP_BYTES
        done = self._unfiltered.get(shard, 0)
        if done + count > budget:
            return False
        self._unfiltered[shard] = done + count
        return True

    def _blooms(self, shard: int) -> dict[int, tuple[int, BloomFilter]]:
        if shard not in self._filters:
            p = self.plan
            key = (self.catalog.prefix, p.instance, shard)
            cached = _FILTER_CACHE.get(key, {})
            fresh = self.catalog.load_blooms(
                p.instance, p.layout, shard, p.layout.live(self.epoch), cached
            )
            _FILTER_CACHE[key] = fresh
            self._filters[shard] = fresh
        return self._filters[shard]

    # -- after the sink committed ------------------------------------------------------

    def remember_committed(self, shards: npt.NDArray[np.int64], ids: Ids) -> None:
        """IDs of a shard an earlier attempt committed: make sure they are marked too.

        That attempt may have died between its commit and its marks; marking again is
        idempotent and keeps 'everything at or below the head is in the catalog'.
        """
        for shard in np.unique(shards):
            self._recommitted.setdefault(int(shard), []).append(ids[shards == shard])

    def after_commit(self) -> None:
        # Re-marks hold only IDs the catalog lacks: the journal of an epoch lists the IDs
        # first marked in it, so rolling the epoch back never removes older, true entries.
        for shard, again in sorted(self._recommitted.items()):
            ids = np.unique(np.concatenate(again).view("S16").ravel()).view(np.uint8)
            ids = ids.reshape(-1, 16)
            lacking = ids[~self._in_catalog(shard, ids)]
            self._new.setdefault(shard, []).append((lacking, None))
        self._recommitted.clear()
        p = self.plan
        gen = p.layout.gen(self.epoch)
        for shard, parts in sorted(self._new.items()):
            ids = _joined_ids(parts)
            if not len(ids):
                continue
            spec, tracked = p.layout.bloom, p.layout.tracked
            if spec.backend == "numpy" and len(ids) * spec.hashes * SPARSE_BYTES < spec.bits // 8:
                # A few bits of a big filter: send them, not a whole filter.
                at = _joined_positions(spec, parts)
                version = self.catalog.merge_bloom_bits(
                    p.instance, shard, gen, at.indexes, spec, tracked
                )
                self._update_cache(shard, gen, version, ids, at)
            else:
                # Part by part: joining the parts' positions first copied them all (500k
                # IDs x 10 hashes: 40 MB, 5% of a PostgreSQL task's CPU).
                delta = spec.empty()
                delta.add_parts(parts)
                version = self.catalog.merge_bloom(p.instance, shard, gen, delta, tracked)
                self._update_cache(shard, gen, version, ids, None, delta)
            self.catalog.mark(p.instance, p.layout, shard, self.epoch, ids)
        self._new.clear()

    def _update_cache(
        self,
        shard: int,
        gen: int,
        version: int,
        ids: Ids,
        at: Positions | None,
        delta: BloomFilter | None = None,
    ) -> None:
        """The worker's cached filter of (shard, gen) with ``ids`` added, at ``version``
        (``delta``: a filter of just them, when one was built); dropped when another
        writer merged in between (reloaded next time)."""
        key = (self.catalog.prefix, self.plan.instance, shard)
        gens = _FILTER_CACHE.get(key)
        if gens is None or gen not in gens or gens[gen][0] != version - 1:
            if gens is not None:
                gens.pop(gen, None)  # someone else wrote too: reload next time
            return
        old = gens[gen][1]
        spec = self.plan.layout.bloom
        if delta is None:
            merged = spec.load(old.to_bytes())
            merged.add(ids, at)
        else:
            merged = spec.load(
                (
                    np.frombuffer(old.to_bytes(), np.uint8)
                    | np.frombuffer(delta.to_bytes(), np.uint8)
                ).tobytes()
            )
        gens[gen] = (version, merged)


def _take(at: Positions | None, rows: npt.NDArray[np.intp]) -> Positions | None:
    return None if at is None else at.take(rows)


def _joined_ids(parts: list[tuple[Ids, Positions | None]]) -> Ids:
    """A shard's new IDs in one piece."""
    if not parts:
        return np.zeros((0, 16), dtype=np.uint8)
    return np.concatenate([p[0] for p in parts])


def _joined_positions(spec: BloomSpec, parts: list[tuple[Ids, Positions | None]]) -> Positions:
    """A shard's new IDs' Bloom positions in one piece (computed for a part without them;
    a numpy filter's ``spec``)."""
    joined = []
    for ids, at in parts:
        joined.append(at if at is not None else spec.bit_numbers(ids))
    return Positions.join(joined)
