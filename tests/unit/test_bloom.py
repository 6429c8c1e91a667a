"""Bloom filters: no false negatives ever, false positives near the target, mergeable bytes."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from exactlyonce.dedup import bloom as bloom_module
from exactlyonce.dedup.bloom import BACKENDS, BloomSpec, ids_from_hex
from exactlyonce.dedup.config import DedupConfig
from exactlyonce.dedup.layout import Layout
from exactlyonce.errors import ConfigError


def ids(start: int, end: int) -> np.ndarray:
    return ids_from_hex([hashlib.md5(str(i).encode()).hexdigest() for i in range(start, end)])


@pytest.mark.parametrize("backend", BACKENDS)
def test_no_false_negatives_and_fp_rate_near_target(backend: str) -> None:
    spec = BloomSpec(20_000, 0.01, backend)  # type: ignore[arg-type]
    bloom = spec.empty()
    bloom.add(ids(0, 20_000))
    assert bloom.contains(ids(0, 20_000)).all()
    fp = bloom.contains(ids(20_000, 60_000)).mean()
    assert 0.002 < fp < 0.02, f"{backend} false-positive rate {fp}"


@pytest.mark.parametrize("backend", BACKENDS)
def test_bytes_round_trip_and_or_merge(backend: str) -> None:
    spec = BloomSpec(5_000, 0.001, backend)  # type: ignore[arg-type]
    left, right = spec.empty(), spec.empty()
    left.add(ids(0, 2_000))
    right.add(ids(2_000, 4_000))
    assert len(left.to_bytes()) == len(right.to_bytes()) == len(spec.empty().to_bytes())
    merged_bytes = np.frombuffer(left.to_bytes(), np.uint8) | np.frombuffer(
        right.to_bytes(), np.uint8
    )
    merged = spec.load(merged_bytes.tobytes())
    assert merged.contains(ids(0, 4_000)).all()
    assert spec.load(left.to_bytes()).contains(ids(0, 2_000)).all()


def test_numpy_filter_is_under_two_bytes_per_id_at_one_in_a_thousand() -> None:
    spec = BloomSpec(1_000_000, 0.001)
    assert spec.empty().nbytes() / spec.capacity <= 2.0


@settings(max_examples=50, deadline=None)
@given(st.sets(st.binary(min_size=16, max_size=16), min_size=1, max_size=300))
def test_an_added_id_is_always_maybe(members: set[bytes]) -> None:
    arr = np.frombuffer(b"".join(members), dtype=np.uint8).reshape(-1, 16)
    bloom = BloomSpec(10, 0.3).empty()  # tiny: saturated filters still never say "no"
    bloom.add(arr)
    assert bloom.contains(arr).all()


def test_sizing_is_validated_and_named() -> None:
    with pytest.raises(ConfigError, match="fp_rate"):
        BloomSpec(10, 0.9)
    with pytest.raises(ConfigError, match="bloom_backend"):
        BloomSpec(10, 0.01, "nope")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="redis_url"):
        DedupConfig("localhost:6379")


def test_layout_keeps_ids_for_the_retention_window() -> None:
    layout = Layout.plan(DedupConfig("redis://x", expected_ids=1_000_000, retention_epochs=100), 4)
    for marked in range(0, 300, 7):
        for later in range(marked, marked + 100):
            assert layout.gen(marked) in layout.live(later), (marked, later)
    assert Layout.from_meta({**layout.to_meta(), "layout": layout.version}) == layout


def test_ids_from_hex_reads_arrow_buffers_like_python_strings() -> None:
    import pyarrow as pa

    hexes = [hashlib.md5(str(i).encode()).hexdigest() for i in range(100)]
    expected = ids_from_hex(hexes)
    assert expected.shape == (100, 16)
    assert bytes(expected[3]) == bytes.fromhex(hexes[3])
    for arrow in (pa.array(hexes), pa.array(hexes, pa.large_string())):
        assert (ids_from_hex(arrow) == expected).all()
        assert (ids_from_hex(arrow.slice(7, 50)) == expected[7:57]).all()  # offset buffers
    chunked = pa.chunked_array([hexes[:40], hexes[40:]])
    assert (ids_from_hex(chunked) == expected).all()


def test_unpacked_add_sets_the_same_bits_as_the_scatter_add(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from exactlyonce.dedup import bloom as bloom_module

    spec = BloomSpec(20_000, 0.001)
    fast = spec.empty()
    fast.add(ids(0, 5_000))
    monkeypatch.setattr(bloom_module, "_UNPACKED_ADD_MAX_BITS", 0)
    slow = spec.empty()
    slow.add(ids(0, 5_000))
    assert fast.to_bytes() == slow.to_bytes()


def test_positions_computed_once_give_the_same_answers_and_bits(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Without the C loops (tests/unit/test_dedup_bloomkernel.py), a task computes the Bloom
    positions of its IDs once and reuses them for every live filter and the delta; the
    filters must answer and grow exactly as without them, and ignore positions of another
    spec."""
    monkeypatch.setattr(bloom_module, "bloom_kernel", lambda: None)
    rng = np.random.default_rng(3)
    spec, other = BloomSpec(5_000, 0.01), BloomSpec(9_000, 0.01)
    ids = rng.integers(0, 256, (4_000, 16), dtype=np.uint8)
    probe = rng.integers(0, 256, (4_000, 16), dtype=np.uint8)
    plain, reused = spec.empty(), spec.empty()
    plain.add(ids[:2_000])
    reused.add(ids[:2_000], spec.positions(ids[:2_000]))
    assert plain.to_bytes() == reused.to_bytes()
    at = spec.positions(np.concatenate([ids, probe]))
    assert at is not None
    assert (plain.contains(ids) == reused.contains(ids, at.take(np.arange(4_000)))).all()
    assert (plain.contains(probe) == reused.contains(probe, at.take(np.arange(4_000, 8_000)))).all()
    wrong = other.positions(probe)
    assert (plain.contains(probe, wrong) == plain.contains(probe)).all()
    assert spec.positions(ids) is not None and BloomSpec(10, 0.01, "rbloom").positions(ids) is None


@pytest.mark.parametrize("path", ["unpacked", "scatter", "c"])
@pytest.mark.parametrize("backend", BACKENDS)
def test_parts_added_one_by_one_set_the_bits_of_all_of_them(
    backend: str, path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``add_parts`` (a task's batches, some with positions computed, some without) sets the
    bits one ``add`` of them all sets, by each of the numpy filter's ways (its C loops, or
    numpy's two)."""
    if path != "c":
        monkeypatch.setattr(bloom_module, "bloom_kernel", lambda: None)
    if path == "scatter":
        monkeypatch.setattr(bloom_module, "_UNPACKED_ADD_MAX_BITS", 0)
    spec = BloomSpec(20_000, 0.01, backend)  # type: ignore[arg-type]
    parts = [ids(0, 3_000), ids(3_000, 3_000), ids(3_000, 7_000), ids(7_000, 7_001)]
    whole, by_parts = spec.empty(), spec.empty()
    whole.add(np.concatenate(parts))
    by_parts.add_parts([(p, spec.positions(p) if n % 2 else None) for n, p in enumerate(parts)])
    assert by_parts.to_bytes() == whole.to_bytes()
