"""Claims: which Spark partition of an epoch writes a record ID, where tasks are not shards.

On the Spark data source path a task gets the upstream plan's partition as it is, so one
record ID may sit in two partitions of one epoch. For an append-only sink (Kafka) two tasks
must not both append it. Before its write, each task claims its IDs in the catalog, per
catalog shard (``<s>:cl:<epoch>``, one slot per shard: Redis Cluster safe):

- an ID nobody claimed is claimed for this (epoch, partition): the task writes it;
- an ID this (epoch, partition) claimed, in this or an earlier attempt: the task writes it
  (a re-run must rewrite what its aborted attempt claimed);
- an ID another partition of the epoch claimed: a duplicate here; that partition writes it.

(IDs the catalog already holds as written are dropped before, by the lookup.) A task asks
only, claiming nothing, when its partition committed in an earlier attempt: it then re-marks
exactly the IDs that attempt wrote (:func:`claim_decisions` with ``take=False``).

A claim is only as good as the partition that holds it running again with the same rows.
So every partition registers the fingerprint of its input (count and sums of the rows' ID
digests) in the epoch's registry (``pt:<epoch>``, in shard 0's slot) before it claims: a
re-run whose fingerprint differs (Spark split the epoch differently, SPARK-28650) is refused
(:class:`~exactlyonce.errors.EpochSplitError`), and the driver advances the head only when
every registered partition ran in the final attempt (:func:`registered`).

Claims serve ONE run of the query (one driver start): its tasks, and Spark's retries of
them, which get the same partitions. A start drops them all (:func:`forget_through`), after
the sink marked in the catalog every ID its committed attempts above the head hold: from then
on those IDs are duplicates for every task, and a partition that did not commit holds nothing
durable, so its claims are only a promise no task may be left to keep (Spark may split the
re-run into fewer partitions). Within the run, :func:`forget` drops an epoch's claims once
the head passed it.
Every script checks the shard's instance marker: claims are never taken in a catalog that was
lost, and a lost catalog loses its claims with it (see :mod:`exactlyonce.integration.datasource`
for why that cannot let an ID be appended twice).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from exactlyonce.dedup.bloom import Ids
from exactlyonce.dedup.catalog import RedisCatalog
from exactlyonce.dedup.scripts import LUA_CLAIM, LUA_REGISTER
from exactlyonce.errors import CatalogLostError

__all__ = [
    "PartitionClaims",
    "claim_decisions",
    "forget",
    "forget_through",
    "registered",
]


def claim_decisions(holders: Sequence[bytes | None], me: bytes, take: bool) -> list[bool]:
    """The rule ``claim.lua`` applies, per ID given who holds it now (None: nobody): True
    when partition ``me`` writes (or, asking only, wrote) it."""
    return [holder == me or (holder is None and take) for holder in holders]


class PartitionClaims:
    """One task's claims: (epoch, Spark partition) in one catalog instance."""

    def __init__(self, catalog: RedisCatalog, instance: str, epoch: int, partition: int) -> None:
        self.catalog = catalog
        self.instance = instance
        self.epoch = epoch
        self.partition = partition

    def register(self, fingerprint: str) -> str:
        """Store this partition's input fingerprint unless one is stored; the stored one."""
        keys = self.catalog.keys
        found = self.catalog.call(
            LUA_REGISTER,
            [keys.marker(0), keys.partitions(self.epoch)],
            [self.instance, self.partition, fingerprint],
        )
        return found.decode() if isinstance(found, bytes) else str(found)

    def claim(self, shard: int, ids: Ids, take: bool = True) -> npt.NDArray[np.bool_]:
        """True for each ID this partition writes (``take``) or wrote (not ``take``)."""
        mine = np.zeros(len(ids), dtype=bool)
        keys = [self.catalog.keys.marker(shard), self.catalog.keys.claims(shard, self.epoch)]
        step = self.catalog.config.chunk_ids
        for start in range(0, len(ids), step):
            chunk = np.ascontiguousarray(ids[start : start + step])
            args = [self.instance, chunk.tobytes(), self.partition, "1" if take else "0"]
            flags = self.catalog.call(LUA_CLAIM, keys, args)
            mine[start : start + len(chunk)] = np.frombuffer(flags, dtype=np.uint8) == ord("1")
        return mine


def registered(catalog: RedisCatalog, instance: str, epoch: int) -> dict[int, str]:
    """The epoch's registered partitions and fingerprints, read with shard 0's marker in one
    step: raises CatalogLostError when the catalog is no longer ``instance`` (the registry
    would then be empty, not true)."""
    keys = catalog.keys
    pipe = catalog.redis.pipeline(transaction=True)  # one slot: shard 0's
    pipe.get(keys.marker(0))
    pipe.hgetall(keys.partitions(epoch))
    marker, found = pipe.execute()
    if (marker or b"").decode() != instance:
        raise CatalogLostError(
            f"catalog {catalog.prefix} was lost during epoch {epoch} (Redis restarted "
            "empty?): its claims cannot be checked. Restart the query: it rebuilds the "
            "catalog from the sink and runs the epoch again"
        )
    return {int(p): f.decode() for p, f in found.items()}


def forget(catalog: RedisCatalog, shards: int, epoch: int) -> None:
    """The head passed ``epoch``: its claims and registry are no longer needed."""
    keys = catalog.keys
    catalog.unlink([keys.claims(s, epoch) for s in range(shards)] + [keys.partitions(epoch)])


def forget_through(catalog: RedisCatalog, head_epoch: int | None = None) -> int:
    """Delete claims and registries of epochs at or below ``head_epoch`` (None: of every
    epoch), found by SCAN on every master; the number of keys deleted."""
    stale = []
    for pattern in catalog.keys.claim_keys:
        for raw in catalog.redis.scan_iter(match=pattern, count=1000):
            epoch = catalog.keys.parse_claims(raw.decode())
            if epoch is not None and (head_epoch is None or epoch <= head_epoch):
                stale.append(raw)
    return catalog.unlink(stale) if stale else 0
