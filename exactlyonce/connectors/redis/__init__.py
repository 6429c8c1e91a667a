"""Exactly-once Redis sink.

Guarantee: every record of the stream is applied to Redis exactly once, through driver crashes,
executor loss, re-run micro-batches, duplicate input and restarts of the sink's Redis, provided
the source replays, the sink's Redis persists what it acknowledged (AOF with
``appendfsync always``; anything less can lose the last commits together with their head) and
nothing else writes the keys. Per ``write`` mode:

- ``"hash"``: ``HSET <key> <column> <value> ...`` of the record's columns (nulls are left out);
- ``"string"``: ``SET <key> <the record as JSON>`` (``PX`` with a TTL);
- ``"stream"``: ``XADD <key> * record_id <id> epoch <epoch> <column> <value> ...``.

Keys come from ``key_template``, ``str.format`` style (``"user:{user_id}"``), filled with each
column's Spark string form (binary as base64, nested types as JSON, as they are stored too).
Hash and string writes are idempotent by key; a stream append is not, so for ``"stream"``
exactly-once rests on the shard markers, the head and the ID catalog alone.

Mechanism (keys of the sink's Redis under ``prefix``, one hash tag per (query, sink)):

- the head ``<prefix>:head`` (a hash: ``epoch``, ``spark_query_id``, ``num_shards``) is read on
  start; epochs at or below it are skipped whole;
- each executor task collects its shard's records as JSON chunks. A task whose new records fit
  in one chunk (``pipeline_size`` records) sends them inline; a bigger one first stages its
  chunks into ``<prefix>:stage:<epoch>:<attempt>`` (a hash of chunk number -> chunk, expiring
  after a day, idempotent to re-send). Then ONE Lua script (EVALSHA), atomically on the
  server: checks that the head is below the epoch and that no shard of the task has a marker
  in ``<prefix>:done:<epoch>``, checks the staging is complete, writes the markers, applies
  every record and the task's dead letters, and drops the staging. Re-running a committed
  epoch or shard is therefore a no-op decided server-side, even when the client died after the
  write or lost the reply (the retry finds its own marker and reports the commit as verified);
- the driver advances the head with a script after every task committed; the same script
  deletes the shard markers of epochs at or below it, and what attempts killed mid-write had
  staged for them (listed in ``<prefix>:stages``).

Why staging rather than one huge call or MULTI: a script call is the only way Redis applies
many commands and a check atomically, but the whole shard must then reach the server before
it runs. Staging keeps each request and the executor's memory to one chunk, lets a lost reply
be retried chunk by chunk, and still applies the shard in one atomic step. The price: the
apply script blocks the sink's Redis while it runs (about 3-4 s per million small records;
other clients get BUSY after 5 s, which this sink's own calls wait out), and once it wrote
it cannot be killed, which is the point. More shards make each step smaller. Redis Cluster
is refused: one atomic step spans the records' keys, which live in many slots.

The ID catalog (in the catalog's Redis, which may be another server) drops duplicate input.
If it is lost, hash and string writes start an empty one (their keys keep them exactly-once);
``"stream"`` rebuilds it from the ``record_id``/``epoch`` fields of every stream it appended
to (listed in ``<prefix>:streams``), so it never guesses.

``mode="upsert"`` (update and changelog streams, ``write`` ``"hash"`` or ``"string"``):
``key_template`` names exactly the ``id_columns``, so one key is one record and always in
the same shard. The apply script applies a record only if its epoch is at least the key's
stored one, else counts it ``stale``: a hash keeps its epoch in the field ``epoch_field``
(the write replaces the whole hash: ``DEL`` then ``HSET``); a string value is the user's JSON
untouched, so its epoch lives in the companion key ``<prefix>:epoch:<key>``. A record whose
``tombstone_column`` is true deletes the key and leaves its epoch behind, in
``<prefix>:tomb:<key>`` (hashes) or the companion key (strings), so an older epoch cannot
bring it back; with ``ttl_seconds`` those expire with the values, and the guard with them.
No dedup catalog: the key and the epoch guard are the idempotence.

A record Redis refuses (a key holding another type: ``WRONGTYPE``) and a record with a null
key or key-template column go to the dead-letter stream ``<prefix>:dead-letters`` (epoch,
ID, error, payload) in the same atomic step; the rest of the shard proceeds.

Records never write control keys (DESIGN invariant 14): every key above lives under
``<prefix>:``, and every dedup catalog's under ``eo:{``. A ``key_template`` whose literal
start puts every key there is refused when the config is built; when only some values could
render a key there, the script checks each record's key against those namespaces and refuses
such a record (a dead letter naming the namespace) before it reads or writes the key.

Example::

    sink = RedisSink("redis://:pw@cache:6379/0", "user:{user_id}", id_columns=["event_id"],
                     query_name="clicks-to-redis", write="hash", ttl_seconds=86400)
    df.writeStream.foreachBatch(sink).option("checkpointLocation", ckpt).start()

Modules: :mod:`.sink` (:class:`RedisSink`, the driver side: settings, preflight, the head),
:mod:`.task` (the executor task's atomic step), :mod:`.template` (key templates),
:mod:`.projection` (the rows Spark hands the tasks), :mod:`.connection` (clients, BUSY,
errors), :mod:`.streams` (stream mode's catalog rebuild), :mod:`.lua` with ``scripts/*.lua``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from exactlyonce.lazy import lazy_exports

if TYPE_CHECKING:
    from exactlyonce.connectors.redis.config import WRITES, RedisSinkConfig, Write
    from exactlyonce.connectors.redis.connection import BUSY_POLICY, connect, patient
    from exactlyonce.connectors.redis.sink import RedisSink
    from exactlyonce.connectors.redis.task import (
        VALUE_COLUMN,
        RedisShardTask,
        RedisShardWriter,
        RedisTarget,
    )
    from exactlyonce.connectors.redis.template import KeyTemplate

# Public name -> the module that defines it, imported when the name is first asked for.
_LAZY = {
    "RedisSinkConfig": "exactlyonce.connectors.redis.config",
    "WRITES": "exactlyonce.connectors.redis.config",
    "Write": "exactlyonce.connectors.redis.config",
    "BUSY_POLICY": "exactlyonce.connectors.redis.connection",
    "connect": "exactlyonce.connectors.redis.connection",
    "patient": "exactlyonce.connectors.redis.connection",
    "RedisSink": "exactlyonce.connectors.redis.sink",
    "RedisShardTask": "exactlyonce.connectors.redis.task",
    "RedisShardWriter": "exactlyonce.connectors.redis.task",
    "RedisTarget": "exactlyonce.connectors.redis.task",
    "VALUE_COLUMN": "exactlyonce.connectors.redis.task",
    "KeyTemplate": "exactlyonce.connectors.redis.template",
}


__all__ = [
    "BUSY_POLICY",
    "VALUE_COLUMN",
    "WRITES",
    "KeyTemplate",
    "RedisShardTask",
    "RedisShardWriter",
    "RedisSink",
    "RedisSinkConfig",
    "RedisTarget",
    "Write",
    "connect",
    "patient",
]

__getattr__, __dir__ = lazy_exports(globals(), _LAZY)
