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


def test_many_batches_of_every_size_merge_their_runs_and_still_find_every_repeat() -> None:
    rng = np.random.default_rng(11)
    pool = rng.integers(0, 256, size=(20_000, 16), dtype=np.uint8)
    sizes = [1, 7, 300, 2, 2_000, 50, 0, 900, 5, 4_000, 64, 1_000, 3, 10_000, 17]
    batches = [pool[rng.integers(0, len(pool), size=n)] for n in sizes]
    got, seen = run(batches)
    assert got == reference(batches)
    assert len(seen.runs) <= np.log2(len(pool)) + 1
    sizes_now = [len(r) for r in seen.runs]
    assert all(a > 2 * b for a, b in zip(sizes_now, sizes_now[1:], strict=False)), sizes_now


def test_the_switch_to_whole_keys_keeps_every_run_seen() -> None:
    rng = np.random.default_rng(5)
    a, b = twins()
    early = [rng.integers(0, 256, size=(n, 16), dtype=np.uint8) for n in (40, 10, 3)]
    batches = [*early, a[None], np.stack([b]), *(e[:2] for e in early), np.stack([a, b])]
    got, seen = run(batches)
    assert got == reference(batches)
    assert seen.whole_keys and len(seen.runs) >= 1


def sorted_batches(
    pool: np.ndarray, sizes: list[int], rng: np.random.Generator
) -> list[np.ndarray]:
    """One sorted (by bytes) stream of IDs drawn from ``pool`` with repeats, cut into
    ``sizes``: each batch sorted and after the one before, as a task of a sorted shard gets."""
    drawn = pool[rng.integers(0, len(pool), size=sum(sizes))]
    stream = drawn[np.argsort(drawn.view("V16").ravel(), kind="stable")]
    cuts = np.cumsum(sizes)[:-1]
    return list(np.split(stream, cuts))


def test_sorted_batches_find_repeats_as_neighbours_across_batch_boundaries() -> None:
    rng = np.random.default_rng(21)
    pool = rng.integers(0, 256, size=(500, 16), dtype=np.uint8)
    batches = sorted_batches(pool, [1, 300, 0, 2, 700, 64, 933], rng)
    got, seen = run(batches)
    assert got == reference(batches)
    assert seen.chain is not None and not seen.runs  # never left the sorted path


def test_a_batch_out_of_order_leaves_the_sorted_path_and_keeps_every_id_seen() -> None:
    rng = np.random.default_rng(8)
    pool = rng.integers(0, 256, size=(400, 16), dtype=np.uint8)
    early = sorted_batches(pool, [200, 300], rng)
    later = [pool[rng.integers(0, len(pool), size=n)] for n in (250, 40)]
    restart = sorted_batches(pool, [100], rng)  # sorted, but starting below the last ID
    batches = [*early, *restart, *later]
    got, seen = run(batches)
    assert got == reference(batches)
    assert seen.chain is None and not seen.whole_keys


def test_twins_on_the_sorted_path_are_both_kept_and_stay_apart_after_it() -> None:
    a, b = twins()  # a < b in byte order, the same first 8 bytes
    low, high = np.zeros(16, dtype=np.uint8), np.full(16, 0xFF, dtype=np.uint8)
    batches = [np.stack([low, a, a]), np.stack([a, b, high]), np.stack([b, a, low, high])]
    got, seen = run(batches)
    assert got == [[0, 1], [1, 2], []]
    assert seen.chain is None and seen.whole_keys
