"""The catalog's Lua scripts, read once from the ``*.lua`` files beside this module.

Each file is the exact text Redis runs (redis-py registers it by its SHA1), so a file starts
with the blank line the scripts always had; comments about them live here, not in the Lua.

Every script names every key it touches in ``KEYS``, and all of them are keys of ONE shard
(one hash tag, one slot; see :mod:`..keys`), so a Redis Cluster routes the call to the master
of that slot and never answers CROSSSLOT. Every script but the rollback takes the shard's
instance marker (``<s>:i``) as ``KEYS[1]``, checks it against ``ARGV[1]`` and answers
``CATALOG_LOST`` on a mismatch: a Redis (or one master) that restarted empty is never read as
"nothing seen yet".

The scripts that change the catalog also keep its usage counters, in the same atomic step:
the shard's stats hash (``<s>:stats``) holds per generation ``ids:<gen>`` (IDs held in its
buckets) and ``bytes:<gen>`` (what Redis's ``MEMORY USAGE`` says its bucket and Bloom keys
take, summed as the change of each key a script touches). Readers sum the shards' hashes;
expiry deletes a generation's fields with its keys. Calling ``MEMORY USAGE`` before writes in
a script needs Redis 5 or later (scripts replicate their effects); it costs about a fifth of
the mark rate (2.4-2.8M instead of 3.3-3.5M IDs/s, 50,000 IDs per call in 2,048 buckets,
measured on the local Redis 7.0).

``bounds`` packs two little-endian uint32 per group of IDs of one bucket: first and end index
into ``blob``, the IDs sorted by bucket (:func:`..layout.pack_groups`); group ``i`` (from 1)
belongs to the bucket key right after the fixed keys. One packed argument instead of two per
group: redis-py encodes every argument in Python (47 ms per 10k IDs with three per bucket).

Partial loss (evicted keys, see :mod:`..keys`): with ``check`` = ``'1'`` (a catalog with a
presence record), a bucket or filter that the shard's presence hash (``<s>:p``) names but that
is gone, or a presence hash of another instance, makes the script delete the shard's marker
and answer ``CATALOG_LOST``; a new bucket or filter is recorded there by the script that
creates it.

- :data:`LUA_MARK` (``mark.lua``): ``KEYS = marker, stats, presence, bucket per group``;
  ``ARGV = instance, blob, bounds, generation, check``. Appends each group's IDs to its
  bucket; returns 1.
- :data:`LUA_LOOKUP` (``lookup.lua``): ``KEYS = marker, presence, bucket per group``; ``ARGV
  = instance, blob, bounds, check``; returns ``'1'`` or ``'0'`` per ID of the blob, in the
  blob's order. A bucket is a string of 16-byte IDs, so a match counts only at a multiple of 16 (the
  ``holds`` helper at the top of the file).
- :data:`LUA_UNMARK` (``unmark.lua``): ``KEYS = stats, bucket per group``; ``ARGV = blob,
  bounds, generation``, no instance check (the driver's rollback). Removes each group's IDs
  from its bucket; returns the number removed.
- :data:`LUA_MERGE` (``merge.lua``): ``KEYS = marker, stats, filter, version, scratch,
  presence``; ``ARGV = instance, delta filter, generation, check``. ORs the delta into the
  shard's persisted Bloom filter and increments its version; returns the new version.
- :data:`LUA_MERGE_BITS` (``merge_bits.lua``): the same keys and checks; ``ARGV = instance,
  bit offsets, generation, check, filter bytes``. Sets each bit (``SETBIT`` offsets, packed as
  little-endian uint32) after growing the filter to its full length, so the result is the
  bytes :data:`LUA_MERGE` gives for a delta holding those bits. A small delta's bits instead
  of the whole filter (9 MB per shard at 10M expected IDs, for a few thousand set bits).

Two more serve the Spark data source path's claims (:mod:`..claims`), with the same instance
check:

- :data:`LUA_CLAIM` (``claim.lua``): ``KEYS = marker, claims hash of (shard, epoch)``;
  ``ARGV = instance, blob of 16-byte IDs, partition, take`` (``'1'``: claim unclaimed IDs,
  ``'0'``: only ask). Returns ``'1'`` per ID the partition holds (now or before), ``'0'``
  per ID another partition holds (or, asking only, nobody).
- :data:`LUA_REGISTER` (``register.lua``): ``KEYS = shard 0's marker, the epoch's
  partition registry``; ``ARGV = instance, partition, fingerprint``. Stores the fingerprint
  unless one is stored; returns the stored one.

The Python twins in :mod:`exactlyonce.testing.memory_scripts` are keyed by these constants.
"""

from __future__ import annotations

from importlib.resources import files

__all__ = [
    "LUA_CLAIM",
    "LUA_LOOKUP",
    "LUA_MARK",
    "LUA_MERGE",
    "LUA_MERGE_BITS",
    "LUA_REGISTER",
    "LUA_UNMARK",
    "load",
]


def load(name: str) -> str:
    """The text of ``<name>.lua`` shipped in this package (package data, also in a wheel)."""
    return files(__name__).joinpath(f"{name}.lua").read_text(encoding="utf-8")


LUA_MARK = load("mark")
LUA_LOOKUP = load("lookup")
LUA_UNMARK = load("unmark")
LUA_MERGE = load("merge")
LUA_MERGE_BITS = load("merge_bits")
LUA_CLAIM = load("claim")
LUA_REGISTER = load("register")
