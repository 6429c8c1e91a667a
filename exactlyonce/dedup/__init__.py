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

Names are imported on first use (PEP 562): a Spark task that unpickles its dedup plan
imports this package on its way, and must not pay for the driver's keeper.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from exactlyonce.lazy import lazy_exports

if TYPE_CHECKING:
    from exactlyonce.dedup.config import DedupConfig
    from exactlyonce.dedup.keeper import CatalogKeeper, RebuildSource
    from exactlyonce.dedup.shard import DedupPlan, DedupStats, TaskDedup

# Public name -> the module that defines it, imported when the name is first asked for.
_LAZY = {
    "DedupConfig": "exactlyonce.dedup.config",
    "CatalogKeeper": "exactlyonce.dedup.keeper",
    "RebuildSource": "exactlyonce.dedup.keeper",
    "DedupPlan": "exactlyonce.dedup.shard",
    "DedupStats": "exactlyonce.dedup.shard",
    "TaskDedup": "exactlyonce.dedup.shard",
}


__all__ = ["CatalogKeeper", "DedupConfig", "DedupPlan", "DedupStats", "RebuildSource", "TaskDedup"]

__getattr__, __dir__ = lazy_exports(globals(), _LAZY)
