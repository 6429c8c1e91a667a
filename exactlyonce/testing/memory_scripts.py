"""Python twins of the catalog's Lua scripts, for :class:`~.memory_redis.MemoryRedis`.

Each twin reads and writes the server's key dict as its script does in Redis, step by step
(see :data:`exactlyonce.dedup.scripts.LUA_MARK`, ``LUA_LOOKUP``, ``LUA_UNMARK`` and
``LUA_MERGE``): the same instance check of the shard's marker answering ``CATALOG_LOST``, the
same packed (start, end) groups with each group's bucket key in ``KEYS``, the same buckets of
16-byte IDs matched only at multiples of 16, the same usage counters in the shard's stats hash
(with :func:`memory_usage` standing for Redis's ``MEMORY USAGE``). A twin runs under the
server's lock, so it is atomic as a script is. ``LUA_CLAIM`` and ``LUA_REGISTER`` (the Spark
data source path's claims, :mod:`exactlyonce.dedup.claims`) have twins too, with the same
instance check.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any

from exactlyonce.dedup.claims import claim_decisions
from exactlyonce.dedup.scripts import (
    LUA_CLAIM,
    LUA_LOOKUP,
    LUA_MARK,
    LUA_MERGE,
    LUA_MERGE_BITS,
    LUA_REGISTER,
    LUA_UNMARK,
)

Data = dict[bytes, Any]  # a key's value: bytes (a string) or dict[bytes, bytes] (a hash)
Script = Callable[[Data, list[bytes], list[bytes]], Any]
ID = 16
KEY_OVERHEAD = 50  # what memory_usage adds per key, standing for Redis's own bookkeeping


def wrong_type() -> Exception:
    import redis

    return redis.ResponseError("WRONGTYPE Operation against a key holding the wrong kind of value")


def _check_instance(data: Data, marker_key: bytes, instance: bytes) -> None:
    if data.get(marker_key) != instance:
        import redis

        raise redis.ResponseError("CATALOG_LOST")


def _groups(bounds: bytes, bucket_keys: list[bytes]) -> list[tuple[bytes, int, int]]:
    """(bucket key, start, end) per group: the keys come in ``KEYS``, the bounds packed."""
    pairs = list(struct.iter_unpack("<II", bounds))
    return [(key, s, e) for key, (s, e) in zip(bucket_keys, pairs, strict=True)]


def _string(data: Data, key: bytes) -> bytes | None:
    value = data.get(key)
    if isinstance(value, dict):
        raise wrong_type()
    return value


def memory_usage(data: Data, key: bytes) -> int | None:
    """The stand-in for ``MEMORY USAGE``: a string's bytes plus a fixed overhead per key."""
    value = data.get(key)
    if value is None:
        return None
    size = sum(len(f) + len(v) for f, v in value.items()) if isinstance(value, dict) else len(value)
    return size + KEY_OVERHEAD


def _count(data: Data, stats_key: bytes, gen: bytes, ids: int, grown: int) -> None:
    """HINCRBY of the generation's ``ids:`` and ``bytes:`` counters in the stats hash."""
    stats = data.setdefault(stats_key, {})
    if not isinstance(stats, dict):
        raise wrong_type()
    for name, delta in ((b"ids:" + gen, ids), (b"bytes:" + gen, grown)):
        stats[name] = str(int(stats.get(name, b"0")) + delta).encode()


def holds(bucket: bytes, record_id: bytes) -> bool:
    """True if ``record_id`` is one of the bucket's 16-byte IDs (a match off the grid is not)."""
    at = bucket.find(record_id)
    while at >= 0:
        if at % ID == 0:
            return True
        at = bucket.find(record_id, at + 1)
    return False


def _lost(data: Data, marker_key: bytes) -> Exception:
    """A key the shard's presence record names is gone: the marker goes, CATALOG_LOST."""
    import redis

    data.pop(marker_key, None)
    return redis.ResponseError("CATALOG_LOST")


def _field(key: bytes) -> bytes:
    """The presence field of a bucket key: ``c:<gen>:<bucket>``, after the hash tag."""
    return key[key.rindex(b"}:") + 2 :]


def mark(data: Data, keys: list[bytes], args: list[bytes]) -> int:
    """LUA_MARK: append each group's IDs to its bucket (a new bucket is recorded in the
    presence hash; one it names that is gone is a loss); count them and the bytes."""
    _check_instance(data, keys[0], args[0])
    blob, check = args[1], args[4] == b"1"
    grown = 0
    for key, start, end in _groups(args[2], keys[3:]):
        before = memory_usage(data, key)
        if before is None:
            presence = _hash_of(data, keys[2])
            if check and _field(key) in presence:
                raise _lost(data, keys[0])
            presence[_field(key)] = b"1"
        data[key] = (_string(data, key) or b"") + blob[start * ID : end * ID]
        grown += (memory_usage(data, key) or 0) - (before or 0)
    _count(data, keys[1], args[3], len(blob) // ID, grown)
    return 1


def lookup(data: Data, keys: list[bytes], args: list[bytes]) -> bytes:
    """LUA_LOOKUP: b'1' or b'0' per ID of the blob, in the blob's order; with the check
    on, a presence hash of another instance or a missing bucket it names is a loss."""
    _check_instance(data, keys[0], args[0])
    blob, check = args[1], args[3] == b"1"
    presence = data.get(keys[1])
    presence = presence if isinstance(presence, dict) else {}
    if check and presence.get(b"i") != args[0]:
        raise _lost(data, keys[0])
    out = bytearray(b"0" * (len(blob) // ID))
    for key, start, end in _groups(args[2], keys[2:]):
        bucket = _string(data, key)
        if bucket is None and check and _field(key) in presence:
            raise _lost(data, keys[0])
        for k in range(start, end):
            if bucket and holds(bucket, blob[k * ID : (k + 1) * ID]):
                out[k] = ord("1")
    return bytes(out)


def unmark(data: Data, keys: list[bytes], args: list[bytes]) -> int:
    """LUA_UNMARK: remove each group's IDs from its bucket; the number removed."""
    blob = args[0]
    removed = grown = 0
    for key, start, end in _groups(args[1], keys[1:]):
        held = _string(data, key)
        if held is None:
            continue
        ids = {blob[k * ID : (k + 1) * ID] for k in range(start, end)}
        kept = [held[j : j + ID] for j in range(0, len(held), ID)]
        removed += sum(1 for i in kept if i in ids)
        before = memory_usage(data, key) or 0
        data[key] = b"".join(i for i in kept if i not in ids)
        grown += (memory_usage(data, key) or 0) - before
    _count(data, keys[0], args[2], -removed, grown)
    return removed


def merge(data: Data, keys: list[bytes], args: list[bytes]) -> int:
    """LUA_MERGE: OR the delta into the filter, bump its version (a filter the presence hash
    names that is gone is a loss); count the bytes."""
    _check_instance(data, keys[0], args[0])
    bloom, version, delta = keys[2], keys[3], args[1]
    presence = _hash_of(data, keys[5])
    field = b"b:" + args[2]
    if args[3] == b"1" and bloom not in data and field in presence:
        raise _lost(data, keys[0])
    presence[field] = b"1"
    before = (memory_usage(data, bloom) or 0) + (memory_usage(data, version) or 0)
    held = _string(data, bloom) or b""
    size = max(len(held), len(delta))
    merged = int.from_bytes(held.ljust(size, b"\0"), "big") | int.from_bytes(
        delta.ljust(size, b"\0"), "big"
    )
    data[bloom] = merged.to_bytes(size, "big")
    new_version = int(_string(data, version) or b"0") + 1
    data[version] = str(new_version).encode()
    after = (memory_usage(data, bloom) or 0) + (memory_usage(data, version) or 0)
    _count(data, keys[1], args[2], 0, after - before)
    return new_version


def merge_bits(data: Data, keys: list[bytes], args: list[bytes]) -> int:
    """LUA_MERGE_BITS: set each bit (Redis's SETBIT offsets: the first bit of a byte is its
    most significant) in the filter grown to its full length; otherwise as :func:`merge`."""
    _check_instance(data, keys[0], args[0])
    bloom, version = keys[2], keys[3]
    presence = _hash_of(data, keys[5])
    field = b"b:" + args[2]
    if args[3] == b"1" and bloom not in data and field in presence:
        raise _lost(data, keys[0])
    before = (memory_usage(data, bloom) or 0) + (memory_usage(data, version) or 0)
    held = bytearray((_string(data, bloom) or b"").ljust(int(args[4]), b"\0"))
    for (offset,) in struct.iter_unpack("<I", args[1]):
        if offset // 8 >= len(held):
            held.extend(b"\0" * (offset // 8 + 1 - len(held)))
        held[offset // 8] |= 0x80 >> (offset % 8)
    data[bloom] = bytes(held)
    presence[field] = b"1"
    new_version = int(_string(data, version) or b"0") + 1
    data[version] = str(new_version).encode()
    after = (memory_usage(data, bloom) or 0) + (memory_usage(data, version) or 0)
    _count(data, keys[1], args[2], 0, after - before)
    return new_version


def _hash_of(data: Data, key: bytes) -> dict[bytes, bytes]:
    held = data.setdefault(key, {})
    if not isinstance(held, dict):
        raise wrong_type()
    return held


def claim(data: Data, keys: list[bytes], args: list[bytes]) -> bytes:
    """LUA_CLAIM: per ID, b'1' if this partition holds it (claiming it when unclaimed and
    asked to take), else b'0'."""
    _check_instance(data, keys[0], args[0])
    blob, me, take = args[1], args[2], args[3] == b"1"
    held = _hash_of(data, keys[1])
    ids = [blob[k : k + ID] for k in range(0, len(blob), ID)]
    mine = claim_decisions([held.get(i) for i in ids], me, take)
    for i, writes in zip(ids, mine, strict=True):
        if writes:
            held.setdefault(i, me)
    if not held:
        del data[keys[1]]
    return bytes(ord("1") if m else ord("0") for m in mine)


def register(data: Data, keys: list[bytes], args: list[bytes]) -> bytes:
    """LUA_REGISTER: store the partition's fingerprint unless one is; the stored one."""
    _check_instance(data, keys[0], args[0])
    return _hash_of(data, keys[1]).setdefault(args[1], args[2])


SCRIPTS: dict[str, Script] = {
    LUA_MARK: mark,
    LUA_LOOKUP: lookup,
    LUA_UNMARK: unmark,
    LUA_MERGE: merge,
    LUA_MERGE_BITS: merge_bits,
    LUA_CLAIM: claim,
    LUA_REGISTER: register,
}
