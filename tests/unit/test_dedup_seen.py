"""A task's seen IDs (:mod:`exactlyonce.dedup.seen`): the first of each ID is kept, every
repeat (in a batch or across batches) dropped, and two different IDs are never taken for one,
not even when they share the 8 bytes the fast path keys by (pure logic)."""

from __future__ import annotations

import numpy as np

from exactlyonce.dedup.seen import SeenIds


def reference(batches: list[np.ndarray]) -> list[list[int]]:
    seen: set[bytes] = set()
    out = []
    for batch in batches:
        rows = []
        for n, row in enumerate(batch):
            if row.tobytes() not in seen:
                seen.add(row.tobytes())
                rows.append(n)
        out.append(rows)
    return out


def run(batches: list[np.ndarray]) -> tuple[list[list[int]], SeenIds]:
    seen = SeenIds()
    return [seen.first(b).tolist() for b in batches], seen


def test_the_first_of_each_id_in_and_across_batches() -> None:
    rng = np.random.default_rng(7)
    pool = rng.integers(0, 256, size=(3_000, 16), dtype=np.uint8)
    batches = [pool[rng.integers(0, len(pool), size=1_000)] for _ in range(8)]
    got, seen = run(batches)
    assert got == reference(batches)
    assert not seen.whole_keys


def twins() -> np.ndarray:
    """Two different IDs with the same first 8 bytes."""
    a = np.arange(16, dtype=np.uint8)
    b = a.copy()
    b[15] ^= 0xFF
    return np.stack([a, b])


def test_two_ids_sharing_their_first_8_bytes_in_one_batch_are_both_kept() -> None:
    a, b = twins()
    other = np.full(16, 9, dtype=np.uint8)
    batches = [np.stack([other, a, a, b, other]), np.stack([b, a, other])]
    got, seen = run(batches)
    assert got == [[0, 1, 3], []]
    assert seen.whole_keys


def test_an_id_sharing_8_bytes_with_one_seen_before_is_kept_and_repeats_still_drop() -> None:
    rng = np.random.default_rng(3)
    a, b = twins()
    early = rng.integers(0, 256, size=(50, 16), dtype=np.uint8)
    batches = [np.concatenate([early, a[None]]), np.stack([b, a]), early[:5], np.stack([b])]
    got, seen = run(batches)
    assert got == reference(batches)
    assert got[1] == [0] and got[2] == [] and got[3] == []
    assert seen.whole_keys
