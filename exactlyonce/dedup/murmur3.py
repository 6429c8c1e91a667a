"""Spark's ``hash()`` (Murmur3 x86_32, seed 42) of 32-character hex record IDs, in numpy.

The sink shards a batch with ``pmod(hash(record_id), shards)`` inside Spark. Rebuilding a lost
catalog outside Spark (from the sink's own rows) must put every ID in the same shard, so this
reproduces Spark's ``Murmur3_x86_32.hashUnsafeBytes`` exactly for inputs whose length is a
multiple of 4, which 32-character IDs are. Tests compare it against Spark itself.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

SPARK_SEED = 42
_C1 = np.uint32(0xCC9E2D51)
_C2 = np.uint32(0x1B873593)


def _rotl(x: npt.NDArray[np.uint32], r: int) -> npt.NDArray[np.uint32]:
    rotated: npt.NDArray[np.uint32] = (x << np.uint32(r)) | (x >> np.uint32(32 - r))
    return rotated


def spark_hash(
    ids_hex: Sequence[str] | npt.NDArray[np.bytes_], seed: int = SPARK_SEED
) -> npt.NDArray[np.int32]:
    """``hash(id)`` as Spark computes it, for equal-length IDs whose length is a multiple of 4."""
    raw = np.asarray(ids_hex, dtype="S")
    width = raw.dtype.itemsize
    if width % 4:
        raise ValueError("only IDs whose byte length is a multiple of 4 are supported")
    words = np.frombuffer(raw.tobytes(), dtype="<u4").reshape(len(raw), width // 4)
    with np.errstate(over="ignore"):
        h1 = np.full(len(raw), seed, dtype=np.uint32)
        for i in range(words.shape[1]):
            k1 = _rotl(words[:, i] * _C1, 15) * _C2
            h1 = _rotl(h1 ^ k1, 13) * np.uint32(5) + np.uint32(0xE6546B64)
        h1 ^= np.uint32(width)
        h1 ^= h1 >> np.uint32(16)
        h1 *= np.uint32(0x85EBCA6B)
        h1 ^= h1 >> np.uint32(13)
        h1 *= np.uint32(0xC2B2AE35)
        h1 ^= h1 >> np.uint32(16)
    return h1.view(np.int32)


def spark_shard(
    ids_hex: Sequence[str] | npt.NDArray[np.bytes_], shards: int
) -> npt.NDArray[np.int64]:
    """``pmod(hash(id), shards)``: the shard Spark assigns each ID."""
    return np.mod(spark_hash(ids_hex).astype(np.int64), shards)
