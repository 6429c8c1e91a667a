"""The numpy Bloom filter's C loops (``exactlyonce/dedup/_bloomkernel.c``) against its numpy
code: the same filter bytes after the same adds, the same answers to ``contains``, for any
IDs and any filter size and hash count (pure logic). Filters are shared through Redis by
workers that may run either, so "the same bytes" is the requirement, not a nicety."""

from __future__ import annotations

from typing import Any
from unittest import mock

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from exactlyonce.dedup import bloom
from exactlyonce.dedup.bloom import BloomSpec, NumpyBloom
from exactlyonce.dedup.native import NATIVE_ENV, bloom_kernel


def kernel() -> object:
    found = bloom_kernel()
    if found is None:
        pytest.fail("the Bloom kernel is not built here (pip install -e . builds it)")
    return found


def numpy_only() -> Any:
    """The numpy code, the C loops out of the way."""
    return mock.patch.object(bloom, "bloom_kernel", lambda: None)


def numpy_filter(spec: BloomSpec, parts: list[np.ndarray]) -> NumpyBloom:
    with numpy_only():
        f = spec.empty()
        f.add_parts([(p, spec.positions(p)) for p in parts])
        assert isinstance(f, NumpyBloom)
        return f


def _as_ids(raw: bytes) -> np.ndarray:
    return np.frombuffer(raw, dtype=np.uint8).reshape(-1, 16)


# Up to 400 IDs from a drawn seed (drawing their 6,400 bytes one by one exceeded Hypothesis's
# entropy limit: its data_too_large health check failed the test now and then), or up to 8
# IDs of drawn bytes (zeros, repeats: what a seed rarely gives).
ids_arrays = st.one_of(
    st.tuples(st.integers(0, 400), st.integers(0, 2**32 - 1)).map(
        lambda n_seed: _as_ids(np.random.default_rng(n_seed[1]).bytes(16 * n_seed[0]))
    ),
    st.integers(0, 8).flatmap(lambda n: st.binary(min_size=16 * n, max_size=16 * n).map(_as_ids)),
)


@settings(max_examples=60, deadline=None)
@given(
    capacity=st.integers(1, 5_000),
    fp=st.sampled_from([0.4, 0.1, 0.01, 0.001]),
    parts=st.lists(ids_arrays, min_size=1, max_size=4),
    probe=ids_arrays,
)
def test_the_c_loops_write_and_read_the_bytes_numpy_does(
    capacity: int, fp: float, parts: list[np.ndarray], probe: np.ndarray
) -> None:
    kernel()
    spec = BloomSpec(capacity, fp, "numpy")
    expected = numpy_filter(spec, parts)
    native = spec.empty()
    native.add_parts([(p, spec.positions(p)) for p in parts])
    assert native.to_bytes() == expected.to_bytes()
    for ids in (probe, *parts):
        with numpy_only():
            want = expected.contains(ids, spec.positions(ids))
        assert native.contains(ids).tolist() == want.tolist()
        assert native.contains(ids[:0]).tolist() == []
    for p in parts:
        assert native.contains(p).all()


def test_the_switch_turns_the_kernel_off_and_positions_on(monkeypatch: pytest.MonkeyPatch) -> None:
    spec = BloomSpec(1000, 0.01, "numpy")
    ids = np.arange(32, dtype=np.uint8).reshape(2, 16)
    kernel()
    assert spec.positions(ids) is None  # the C loops hash inside themselves
    assert spec.bit_numbers(ids).indexes.shape == (2, spec.hashes)
    monkeypatch.setenv(NATIVE_ENV, "0")
    bloom_kernel.cache_clear()
    try:
        assert bloom_kernel() is None
        at = spec.positions(ids)
        assert at is not None and at.indexes.shape == (2, spec.hashes)
    finally:
        bloom_kernel.cache_clear()


def test_the_kernel_refuses_a_filter_shorter_than_its_bits() -> None:
    k = kernel()
    with pytest.raises(ValueError, match="shorter"):
        k.contains(np.zeros(8, np.uint8), 128, 3, np.zeros((1, 16), np.uint8))  # type: ignore[attr-defined]
    with pytest.raises(ValueError, match="16 bytes"):
        k.add(np.zeros(8, np.uint8), 64, 3, np.zeros(15, np.uint8))  # type: ignore[attr-defined]
    with pytest.raises(BufferError):
        k.add(np.zeros(8, np.uint8).tobytes(), 64, 3, np.zeros((1, 16), np.uint8))  # type: ignore[attr-defined]
