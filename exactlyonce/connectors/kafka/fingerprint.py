"""The fingerprint of a Spark partition's input: which rows a task of the data source path got.

Order-independent (Spark may hand a re-run the same rows in another order) and counting every
row handed to the task, repeats and bad records included: the row count, then per 64-bit half
of the rows' 16-byte digests the sum (mod 2**64) and the XOR. A row's digest is its record ID
(an MD5); a row without one (a null key) digests its dead-letter payload. Two inputs that
differ only in the order of their rows have the same fingerprint; any other difference changes
it, but for an MD5 collision.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable

import numpy as np
import pyarrow as pa

__all__ = ["input_fingerprint"]


def input_fingerprint(
    batches: Iterable[pa.RecordBatch], id_column: str, payload_column: str
) -> str:
    """``<rows>-<sum>-<xor>`` over every row of ``batches`` (hex, 32 digits each)."""
    rows = 0
    total = np.zeros(2, dtype=np.uint64)
    xor = np.zeros(2, dtype=np.uint64)
    for batch in batches:
        digests = _digests(batch, id_column, payload_column)
        if not len(digests):
            continue
        rows += len(digests)
        halves = digests.view("<u8").reshape(-1, 2)
        total += halves.sum(axis=0, dtype=np.uint64)
        xor ^= np.bitwise_xor.reduce(halves, axis=0)
    return f"{rows}-{int(total[0]):016x}{int(total[1]):016x}-{int(xor[0]):016x}{int(xor[1]):016x}"


def _digests(batch: pa.RecordBatch, id_column: str, payload_column: str) -> np.ndarray:
    ids = batch.column(id_column).to_pylist()
    payloads = batch.column(payload_column).to_pylist()
    raw = b"".join(
        bytes.fromhex(i) if i is not None else _bad_row(p)
        for i, p in zip(ids, payloads, strict=True)
    )
    return np.frombuffer(raw, dtype=np.uint8).reshape(-1, 16)


def _bad_row(payload: str | None) -> bytes:
    text = "\0bad record\0" + (payload or "")
    return hashlib.md5(text.encode(), usedforsecurity=False).digest()
