"""Bloom filters over 16-byte record IDs, with three interchangeable backends.

- ``numpy`` (default): vectorised double hashing straight on the ID bytes (IDs are MD5, so
  their halves are already uniform hashes). Measured fastest here; see bench/results/dedup.json.
- ``rbloom``: the Rust filter, with the ID itself as its (stable, cross-process) hash.
- ``pybloom-live``: the pure-Python filter users asked for.

Every backend serialises to bytes of a length fixed by (capacity, fp_rate), so two filters of
one spec merge with a bitwise OR. That is how the persisted copy in Redis grows (``BITOP OR``)
without a lost update. Filters only ever answer "maybe" (a hint to confirm in the catalog) or
"no"; a "no" is trusted only from a filter known to be complete (DESIGN invariants 2 and 3).
"""

from __future__ import annotations

import binascii
import importlib.util
import math
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from exactlyonce.dedup.native import bloom_kernel
from exactlyonce.errors import ConfigError

Backend = Literal["numpy", "rbloom", "pybloom-live"]
BACKENDS: tuple[Backend, ...] = ("numpy", "rbloom", "pybloom-live")
# Optional backends come with the ``bloom`` extra; the default numpy filter needs nothing more.
_BACKEND_MODULES = {"rbloom": "rbloom", "pybloom-live": "pybloom_live"}

Ids = npt.NDArray[np.uint8]  # shape (n, 16)

# NumpyBloom.add unpacks filters up to this size (a bool per bit: 64 MB) to set bits.
_UNPACKED_ADD_MAX_BITS = 1 << 26


@dataclass(frozen=True)
class BloomSpec:
    """Size of one filter: how many IDs it must hold, at what false-positive rate."""

    capacity: int
    fp_rate: float
    backend: Backend = "numpy"

    def __post_init__(self) -> None:
        if self.capacity < 1:
            raise ConfigError("expected_ids", f"must be at least 1, got {self.capacity}")
        if not 0 < self.fp_rate < 0.5:
            raise ConfigError("fp_rate", f"must be between 0 and 0.5, got {self.fp_rate}")
        if self.backend not in BACKENDS:
            raise ConfigError("bloom_backend", f"must be one of {list(BACKENDS)}")
        module = _BACKEND_MODULES.get(self.backend)
        if module is not None and importlib.util.find_spec(module) is None:
            raise ConfigError(
                "bloom_backend",
                f"{self.backend!r} is not installed: pip install 'exactlyonce[bloom]' "
                "(or use the default 'numpy' filter)",
            )

    @property
    def bits(self) -> int:
        m = -self.capacity * math.log(self.fp_rate) / (math.log(2) ** 2)
        return max(64, math.ceil(m / 64) * 64)

    @property
    def hashes(self) -> int:
        return max(1, round(self.bits / self.capacity * math.log(2)))

    def empty(self) -> BloomFilter:
        return _BACKEND_CLASSES[self.backend].empty(self)

    def load(self, data: bytes) -> BloomFilter:
        return _BACKEND_CLASSES[self.backend].from_bytes(self, data)

    def positions(self, ids: Ids) -> Positions | None:
        """Where ``ids``' bits are in every filter of this spec, computed once (the numpy
        backend without its C loops; None otherwise: the C loops and the other backends
        hash inside themselves)."""
        if self.backend != "numpy" or bloom_kernel() is not None:
            return None
        return _numpy_positions(self, ids)

    def bit_numbers(self, ids: Ids) -> Positions:
        """``ids``' bit numbers in a numpy filter of this spec, always computed (what a
        merge of bits sends)."""
        return _numpy_positions(self, ids)


def _numpy_positions(spec: BloomSpec, ids: Ids) -> Positions:
    return Positions(spec, _bit_indexes(ids, spec.bits, spec.hashes))


def _bit_indexes(ids: Ids, bits: int, hashes: int) -> npt.NDArray[np.uint64]:
    """(n, hashes) bit numbers: double hashing on the ID's two 64-bit halves (IDs are MD5)."""
    halves = np.ascontiguousarray(ids).view(np.uint64)
    h1, h2 = halves[:, 0], halves[:, 1] | np.uint64(1)
    k = np.arange(hashes, dtype=np.uint64)
    with np.errstate(over="ignore"):
        idx: npt.NDArray[np.uint64] = (h1[:, None] + k[None, :] * h2[:, None]) % np.uint64(bits)
    return idx


@dataclass
class Positions:
    """The bit numbers of a batch of IDs in any numpy filter of ``spec``. A task computes them
    once and uses them for every live generation of a shard's filter and again for the delta
    it adds after the commit (computing them was ~14% of a PostgreSQL task's CPU, twice)."""

    spec: BloomSpec
    indexes: npt.NDArray[np.uint64]  # (n, hashes)

    def take(self, rows: Any) -> Positions:
        return Positions(self.spec, self.indexes[rows])

    @staticmethod
    def join(parts: list[Positions]) -> Positions:
        return Positions(parts[0].spec, np.concatenate([p.indexes for p in parts]))

    @cached_property
    def byte_and_bit(self) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.uint8]]:
        idx = self.indexes
        return (idx >> np.uint64(3)).astype(np.int64), (idx & np.uint64(7)).astype(np.uint8)


class BloomFilter(ABC):
    spec: BloomSpec

    @classmethod
    @abstractmethod
    def empty(cls, spec: BloomSpec) -> BloomFilter: ...

    @classmethod
    @abstractmethod
    def from_bytes(cls, spec: BloomSpec, data: bytes) -> BloomFilter: ...

    @abstractmethod
    def to_bytes(self) -> bytes: ...

    @abstractmethod
    def add(self, ids: Ids, positions: Positions | None = None) -> None:
        """Add ``ids``; ``positions``: theirs from ``spec.positions(ids)``, if computed."""

    def add_parts(self, parts: Sequence[tuple[Ids, Positions | None]]) -> None:
        """Add each part's IDs (as :meth:`add`), without joining them first."""
        for ids, positions in parts:
            self.add(ids, positions)

    @abstractmethod
    def contains(self, ids: Ids, positions: Positions | None = None) -> npt.NDArray[np.bool_]:
        """True where the ID may be present, False where it certainly is not."""

    def nbytes(self) -> int:
        return len(self.to_bytes())


class NumpyBloom(BloomFilter):
    def __init__(self, spec: BloomSpec, bits: npt.NDArray[np.uint8]) -> None:
        self.spec = spec
        self.bits = bits

    @classmethod
    def empty(cls, spec: BloomSpec) -> NumpyBloom:
        return cls(spec, np.zeros(spec.bits // 8, dtype=np.uint8))

    @classmethod
    def from_bytes(cls, spec: BloomSpec, data: bytes) -> NumpyBloom:
        bits = np.zeros(spec.bits // 8, dtype=np.uint8)
        loaded = np.frombuffer(data, dtype=np.uint8)[: len(bits)]
        bits[: len(loaded)] = loaded
        return cls(spec, bits)

    def to_bytes(self) -> bytes:
        return self.bits.tobytes()

    def _positions(self, ids: Ids, given: Positions | None) -> Positions:
        if given is not None and given.spec == self.spec:
            return given
        return _numpy_positions(self.spec, ids)

    def add(self, ids: Ids, positions: Positions | None = None) -> None:
        self.add_parts([(ids, positions)])

    def add_parts(self, parts: Sequence[tuple[Ids, Positions | None]]) -> None:
        parts = [(ids, at) for ids, at in parts if len(ids)]
        if not parts:
            return
        kernel = bloom_kernel()
        if kernel is not None:  # the same bits, set in C (exactlyonce/dedup/_bloomkernel.c)
            for ids, _ in parts:
                kernel.add(self.bits, self.spec.bits, self.spec.hashes, _contiguous(ids))
            return
        if self.spec.bits <= _UNPACKED_ADD_MAX_BITS:
            # Scatter into one bool per bit and pack, once for all parts: 2x faster than
            # ``bitwise_or.at`` (150k IDs, 7.2M bits: 0.33 s instead of 0.70 s on a loaded
            # 2-core machine).
            flat = np.zeros(self.spec.bits, dtype=bool)
            for ids, given in parts:
                flat[self._positions(ids, given).indexes.ravel()] = True
            self.bits |= np.packbits(flat, bitorder="little")
            return
        for ids, given in parts:
            byte, bit = self._positions(ids, given).byte_and_bit
            np.bitwise_or.at(self.bits, byte, np.left_shift(np.uint8(1), bit))

    def contains(self, ids: Ids, positions: Positions | None = None) -> npt.NDArray[np.bool_]:
        if not len(ids):
            return np.zeros(0, dtype=bool)
        kernel = bloom_kernel()
        if kernel is not None:
            found = kernel.contains(self.bits, self.spec.bits, self.spec.hashes, _contiguous(ids))
            return np.frombuffer(found, dtype=bool)
        byte, bit = self._positions(ids, positions).byte_and_bit
        result = np.asarray(((self.bits[byte] >> bit) & 1).all(axis=1), dtype=bool)
        return result


def _contiguous(ids: Ids) -> npt.NDArray[np.uint8]:
    return np.ascontiguousarray(ids, dtype=np.uint8).reshape(-1, 16)


def _id_hash(item: bytes) -> int:
    return int.from_bytes(item, "big", signed=True)


class RBloom(BloomFilter):
    def __init__(self, spec: BloomSpec, inner: Any) -> None:
        self.spec = spec
        self.inner = inner

    @classmethod
    def empty(cls, spec: BloomSpec) -> RBloom:
        import rbloom

        return cls(spec, rbloom.Bloom(spec.capacity, spec.fp_rate, hash_func=_id_hash))

    @classmethod
    def from_bytes(cls, spec: BloomSpec, data: bytes) -> RBloom:
        import rbloom

        empty = cls.empty(spec).to_bytes()
        if len(data) < len(empty):
            data = data + empty[len(data) :]
        return cls(spec, rbloom.Bloom.load_bytes(data[: len(empty)], _id_hash))

    def to_bytes(self) -> bytes:
        return bytes(self.inner.save_bytes())

    def add(self, ids: Ids, positions: Positions | None = None) -> None:
        self.inner.update([row.tobytes() for row in ids])

    def contains(self, ids: Ids, positions: Positions | None = None) -> npt.NDArray[np.bool_]:
        inner = self.inner
        return np.fromiter((row.tobytes() in inner for row in ids), dtype=bool, count=len(ids))


class PyBloomLive(BloomFilter):
    def __init__(self, spec: BloomSpec, inner: Any) -> None:
        self.spec = spec
        self.inner = inner
        # pybloom-live refuses adds past its capacity; the catalog's retention bounds the
        # count instead, and a fuller filter only raises the false-positive rate (hints).
        inner.capacity = 1 << 62

    @classmethod
    def empty(cls, spec: BloomSpec) -> PyBloomLive:
        from pybloom_live import BloomFilter as PyBloom

        return cls(spec, PyBloom(capacity=spec.capacity, error_rate=spec.fp_rate))

    @classmethod
    def from_bytes(cls, spec: BloomSpec, data: bytes) -> PyBloomLive:
        from bitarray import bitarray

        filt = cls.empty(spec)
        size = len(filt.inner.bitarray)
        bits = bitarray(endian="little")
        bits.frombytes(data[: (size + 7) // 8].ljust((size + 7) // 8, b"\0"))
        filt.inner.bitarray = bits[:size]
        return filt

    def to_bytes(self) -> bytes:
        return bytes(self.inner.bitarray.tobytes())

    def add(self, ids: Ids, positions: Positions | None = None) -> None:
        add = self.inner.add
        for row in ids:
            add(row.tobytes())

    def contains(self, ids: Ids, positions: Positions | None = None) -> npt.NDArray[np.bool_]:
        inner = self.inner
        return np.fromiter((row.tobytes() in inner for row in ids), dtype=bool, count=len(ids))


_BACKEND_CLASSES: dict[str, type[BloomFilter]] = {
    "numpy": NumpyBloom,
    "rbloom": RBloom,
    "pybloom-live": PyBloomLive,
}


def ids_from_hex(hex_ids: Any) -> Ids:
    """32-character hex IDs (a pyarrow array, numpy 'S32' array or list) as an (n, 16) array."""
    packed = _packed_hex(hex_ids)
    if packed is not None:
        return np.frombuffer(binascii.unhexlify(packed), dtype=np.uint8).reshape(-1, 16)
    if hasattr(hex_ids, "to_numpy"):  # pyarrow: no per-value Python objects
        hex_ids = hex_ids.to_numpy(zero_copy_only=False)
    raw = np.asarray(hex_ids, dtype="S32")
    return np.frombuffer(bytes.fromhex(raw.tobytes().decode("ascii")), dtype=np.uint8).reshape(
        len(raw), 16
    )


def _packed_hex(hex_ids: Any) -> memoryview | None:
    """The hex characters of a pyarrow string array of 32-character values without nulls,
    straight from its data buffer (no Python object per value); None for anything else."""
    import pyarrow as pa

    if isinstance(hex_ids, pa.ChunkedArray):
        hex_ids = hex_ids.combine_chunks()
    if not isinstance(hex_ids, pa.Array) or hex_ids.null_count or not len(hex_ids):
        return None
    if pa.types.is_string(hex_ids.type):
        width = np.int32
    elif pa.types.is_large_string(hex_ids.type):
        width = np.int64
    else:
        return None
    _, offsets_buf, data_buf = hex_ids.buffers()
    offsets = np.frombuffer(offsets_buf, dtype=width)[
        hex_ids.offset : hex_ids.offset + len(hex_ids) + 1
    ]
    if not (np.diff(offsets) == 32).all():
        return None
    return memoryview(data_buf)[int(offsets[0]) : int(offsets[-1])]
