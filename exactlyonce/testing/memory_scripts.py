"""Python twins of the catalog's Lua scripts, for :class:`~.memory_redis.MemoryRedis`.

Each twin reads and writes the server's key dict as its script does in Redis, step by step
(see :data:`exactlyonce.dedup.scripts.LUA_MARK`, ``LUA_LOOKUP`` and ``LUA_UNMARK``): the same
instance check answering ``CATALOG_LOST``, the same packed groups of (bucket, start, end),
the same buckets of 16-byte IDs matched only at multiples of 16. A twin runs under the
server's lock, so it is atomic as a script is.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any

from exactlyonce.dedup.scripts import LUA_LOOKUP, LUA_MARK, LUA_UNMARK

Data = dict[bytes, Any]  # a key's value: bytes (a string) or dict[bytes, bytes] (a hash)
Script = Callable[[Data, list[bytes], list[bytes]], Any]
ID = 16


def wrong_type() -> Exception:
    import redis

    return redis.ResponseError("WRONGTYPE Operation against a key holding the wrong kind of value")


def _check_instance(data: Data, meta_key: bytes, instance: bytes) -> None:
    meta = data.get(meta_key)
    if not isinstance(meta, dict) or meta.get(b"instance") != instance:
        import redis

        raise redis.ResponseError("CATALOG_LOST")


def _groups(packed: bytes) -> list[tuple[int, int, int]]:
    return list(struct.iter_unpack("<III", packed))


def _bucket_key(prefix: bytes, bucket: int) -> bytes:
    return prefix + format(bucket, "x").encode()


def _string(data: Data, key: bytes) -> bytes | None:
    value = data.get(key)
    if isinstance(value, dict):
        raise wrong_type()
    return value


def holds(bucket: bytes, record_id: bytes) -> bool:
    """True if ``record_id`` is one of the bucket's 16-byte IDs (a match off the grid is not)."""
    at = bucket.find(record_id)
    while at >= 0:
        if at % ID == 0:
            return True
        at = bucket.find(record_id, at + 1)
    return False


def mark(data: Data, keys: list[bytes], args: list[bytes]) -> int:
    """LUA_MARK: append each group's IDs to its bucket."""
    _check_instance(data, keys[0], args[0])
    prefix, blob = args[1], args[2]
    for bucket, start, end in _groups(args[3]):
        key = _bucket_key(prefix, bucket)
        data[key] = (_string(data, key) or b"") + blob[start * ID : end * ID]
    return 1


def lookup(data: Data, keys: list[bytes], args: list[bytes]) -> bytes:
    """LUA_LOOKUP: b'1' or b'0' per ID of the blob, in the blob's order."""
    _check_instance(data, keys[0], args[0])
    prefix, blob = args[1], args[2]
    out = bytearray(b"0" * (len(blob) // ID))
    for bucket_no, start, end in _groups(args[3]):
        bucket = _string(data, _bucket_key(prefix, bucket_no))
        for k in range(start, end):
            if bucket and holds(bucket, blob[k * ID : (k + 1) * ID]):
                out[k] = ord("1")
    return bytes(out)


def unmark(data: Data, keys: list[bytes], args: list[bytes]) -> int:
    """LUA_UNMARK: remove the blob's IDs from their buckets; the number removed."""
    prefix, blob, bits = args[0], args[1], int(args[2])
    drop: dict[bytes, set[bytes]] = {}
    for j in range(0, len(blob), ID):
        record_id = blob[j : j + ID]
        bucket = ((record_id[0] << 8) | record_id[1]) >> (16 - bits)
        drop.setdefault(_bucket_key(prefix, bucket), set()).add(record_id)
    removed = 0
    for key, ids in drop.items():
        held = _string(data, key)
        if held is None:
            continue
        kept = [held[j : j + ID] for j in range(0, len(held), ID)]
        removed += sum(1 for i in kept if i in ids)
        data[key] = b"".join(i for i in kept if i not in ids)
    return removed


SCRIPTS: dict[str, Script] = {LUA_MARK: mark, LUA_LOOKUP: lookup, LUA_UNMARK: unmark}
