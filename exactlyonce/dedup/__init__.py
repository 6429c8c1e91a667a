"""Dedup: deterministic record IDs, Bloom filters and the Redis catalog of IDs written.

The sinks use it through two small objects, one per side of Spark:

- driver: :class:`~exactlyonce.dedup.keeper.CatalogKeeper` — ``open(head_epoch, shards)``
  once per query start (creates or checks the catalog, rolls back IDs above the head),
  ``plan`` (what every task gets), ``ensure(head_epoch)`` before each epoch (detects a lost
  catalog and rebuilds or refuses), ``recoverable()`` after a failed write, and
  ``after_head(epoch)`` once the head advanced;
- executor task: :class:`~exactlyonce.dedup.shard.TaskDedup` — ``keep(shards, ids)`` per
  batch (the mask of new records: repeats, Bloom "no", catalog-confirmed "maybe"),
  ``remember_committed`` for shards an earlier attempt committed, ``after_commit()`` after
  the sink's commit (marks IDs: never before, invariant 1), ``stats`` and ``close()``.

Everything else here (:mod:`.ids`, :mod:`.bloom`, :mod:`.catalog`, :mod:`.murmur3`) sits
behind those two.
"""

from __future__ import annotations

from exactlyonce.dedup.config import DedupConfig
from exactlyonce.dedup.keeper import CatalogKeeper, RebuildSource
from exactlyonce.dedup.shard import DedupPlan, DedupStats, TaskDedup

__all__ = ["CatalogKeeper", "DedupConfig", "DedupPlan", "DedupStats", "RebuildSource", "TaskDedup"]
