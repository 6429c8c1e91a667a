"""In-memory fakes to test exactly-once pipelines and the protocol itself, without services.

- :class:`MemoryRedis`: the dedup catalog's Redis, in this process. The real catalog code
  runs against it through the one seam ``DedupConfig.connect``
  (:meth:`MemoryRedis.dedup_config` builds such a config);
- :class:`MemoryStore`: a destination (tables, heads, shard commits, dead letters) that
  outlives sink objects, so a restart is a new sink on the same store; it counts every row a
  task tried to write, committed or not;
- :class:`MemorySink`: an :class:`~exactlyonce.connectors.base.ExactlyOnceSink` writing into
  a store, with the real protocol, shard tasks and catalog;
- :func:`run_in_process`: one epoch through the whole protocol, its tasks run in a loop here,
  as Spark would run them in executors.

Example (runs as it stands)::

    from exactlyonce.dedup.ids import record_id
    from exactlyonce.testing import MemoryRedis, MemorySink, MemoryStore, run_in_process

    catalog, store = MemoryRedis(), MemoryStore()
    config = catalog.dedup_config(expected_ids=1000)

    def new_sink() -> MemorySink:  # a restart is a new sink object on the same store
        return MemorySink(store, "events", ["event_id"], "clicks", mode="append",
                          shards=2, dedup=config)

    run_in_process(new_sink(), 0, [{"event_id": "a", "n": 1}, {"event_id": "b", "n": 2}])
    run_in_process(new_sink(), 1, [{"event_id": "b", "n": 2}, {"event_id": "c", "n": 3}])
    run_in_process(new_sink(), 1, [{"event_id": "c", "n": 3}])  # a replay: skipped whole
    assert sorted(r["event_id"] for r in store.rows("events")) == ["a", "b", "c"]
    assert store.write_attempts[record_id(["b"])] == 1  # "b" was never re-written

A :class:`MemoryStore` and a :class:`MemoryRedis` live in one process: shipping them to
Spark executors is refused when they are pickled. A :class:`FileStore` (``MemorySink(None,
..., path=...)``) is one store for every process on this machine, Spark's workers included;
:data:`exactlyonce.testing.kind.KIND` is the sink's registry entry.
"""

from __future__ import annotations

from exactlyonce.testing.epochs import in_process_write, run_in_process, schema_of, shard_batches
from exactlyonce.testing.memory_redis import MemoryPipeline, MemoryRedis, MemoryRedisClient
from exactlyonce.testing.sink import MemoryShardTask, MemoryShardWriter, MemorySink, MemoryTarget
from exactlyonce.testing.store import (
    FileStore,
    MemoryHeadStore,
    MemoryStore,
    MemoryTable,
    ShardCommittedError,
)

__all__ = [
    "FileStore",
    "MemoryHeadStore",
    "MemoryPipeline",
    "MemoryRedis",
    "MemoryRedisClient",
    "MemoryShardTask",
    "MemoryShardWriter",
    "MemorySink",
    "MemoryStore",
    "MemoryTable",
    "MemoryTarget",
    "ShardCommittedError",
    "in_process_write",
    "run_in_process",
    "schema_of",
    "shard_batches",
]
