"""``pack_groups``: the IDs sorted by bucket, as the catalog's Lua scripts read them, against
a plain reference (an int64 stable argsort and a row-wise copy, as it was written first)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from exactlyonce.dedup.layout import MAX_PER_CALL, buckets, pack_groups


def reference(
    ids: np.ndarray, bits: int
) -> tuple[list[int], bytes, list[tuple[int, int]], list[int]]:
    keys = buckets(ids, bits)
    order = np.argsort(keys, kind="stable")
    sorted_keys = keys[order]
    groups: list[tuple[int, int]] = []
    start = 0
    for i in range(1, len(ids) + 1):
        if i == len(ids) or sorted_keys[i] != sorted_keys[start]:
            groups += [(lo, min(lo + MAX_PER_CALL, i)) for lo in range(start, i, MAX_PER_CALL)]
            start = i
    blob = b"".join(bytes(ids[j]) for j in order)
    return order.tolist(), blob, groups, [int(sorted_keys[lo]) for lo, _ in groups]


def unpacked(
    ids: np.ndarray, bits: int
) -> tuple[list[int], bytes, list[tuple[int, int]], list[int]]:
    packed = pack_groups(ids, bits)
    bounds = np.frombuffer(packed.bounds, dtype="<u4").reshape(-1, 2)
    return (
        packed.order.tolist(),
        packed.blob,
        [(int(lo), int(hi)) for lo, hi in bounds],
        packed.buckets,
    )


@settings(max_examples=60, deadline=None)
@given(
    n=st.integers(1, 300),  # callers never pack an empty batch
    bits=st.integers(1, 16),
    seed=st.integers(0, 2**32 - 1),
)
def test_pack_groups_matches_the_reference(n: int, bits: int, seed: int) -> None:
    ids = np.random.default_rng(seed).integers(0, 256, size=(n, 16), dtype=np.uint8)
    assert unpacked(ids, bits) == reference(ids, bits)


@pytest.mark.parametrize("bits", [1, 11, 16])
def test_an_oversized_bucket_is_split_into_groups_of_at_most_max_per_call(bits: int) -> None:
    ids = np.zeros((2 * MAX_PER_CALL + 7, 16), dtype=np.uint8)
    ids[:, 15] = np.arange(len(ids)) % 256  # one bucket, IDs that differ only in their tail
    got = unpacked(ids, bits)
    assert got == reference(ids, bits)
    assert [hi - lo for lo, hi in got[2]] == [MAX_PER_CALL, MAX_PER_CALL, 7]


def test_ids_of_a_sliced_or_strided_batch_pack_as_their_copy() -> None:
    ids = np.random.default_rng(9).integers(0, 256, size=(500, 16), dtype=np.uint8)
    assert unpacked(ids[::3], 11) == reference(np.ascontiguousarray(ids[::3]), 11)
