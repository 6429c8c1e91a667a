"""The Real-time Mode writer's pure bookkeeping (exactlyonce.connectors.base.frontier): which
rows a commit may take (source-offset boundaries, DESIGN invariant 15), what a re-run skips,
and the preconditions it refuses."""

from __future__ import annotations

import pytest

from exactlyonce.connectors.base.frontier import SourceTracker, source_record_id, starting_offsets
from exactlyonce.errors import ConfigError, FrontierMovedError

P0 = ("t", 0)
P1 = ("t", 1)


def fed(tracker: SourceTracker, rows: list[tuple[tuple[str, int], int]]) -> list[bool]:
    return [tracker.add(key, offset, (key, offset)) for key, offset in rows]


def test_one_row_per_record_commits_every_pending_row() -> None:
    tracker = SourceTracker("one")
    tracker.read(P0, None)
    fed(tracker, [(P0, 0), (P0, 1), (P0, 2)])
    chunk = tracker.take(final=False)
    assert chunk is not None
    assert [r for r in chunk.rows] == [(P0, 0), (P0, 1), (P0, 2)]
    assert chunk.expected == {P0: None} and chunk.next_offsets == {P0: 3}
    tracker.committed(chunk)
    assert tracker.take(final=False) is None
    assert tracker.frontier(P0) == 3


def test_many_rows_per_record_hold_back_the_highest_offset_until_the_end() -> None:
    tracker = SourceTracker("many")
    tracker.read(P0, 10)
    fed(tracker, [(P0, 10), (P0, 10), (P0, 11), (P0, 11)])
    chunk = tracker.take(final=False)
    assert chunk is not None and chunk.rows == [(P0, 10), (P0, 10)]
    assert chunk.expected == {P0: 10} and chunk.next_offsets == {P0: 11}
    tracker.committed(chunk)
    assert tracker.take(final=False) is None  # offset 11 may have more rows to come
    last = tracker.take(final=True)
    assert last is not None and last.rows == [(P0, 11), (P0, 11)]
    assert last.expected == {P0: 11} and last.next_offsets == {P0: 12}


def test_rows_below_the_frontier_are_skipped_and_counted() -> None:
    tracker = SourceTracker("one")
    tracker.read(P0, 2)
    assert fed(tracker, [(P0, 0), (P0, 1), (P0, 2), (P0, 3)]) == [False, False, True, True]
    assert tracker.skipped == 2
    chunk = tracker.take(final=True)
    assert chunk is not None and chunk.rows == [(P0, 2), (P0, 3)]
    assert chunk.expected == {P0: 2} and chunk.next_offsets == {P0: 4}


def test_partitions_are_tracked_apart() -> None:
    tracker = SourceTracker("one")
    tracker.read(P0, None)
    tracker.read(P1, 5)
    fed(tracker, [(P0, 0), (P1, 5), (P0, 1), (P1, 6)])
    chunk = tracker.take(final=False)
    assert chunk is not None and len(chunk.rows) == 4
    assert chunk.next_offsets == {P0: 2, P1: 7}
    assert chunk.expected == {P0: None, P1: 5}


def test_a_failed_commit_keeps_nothing_pending_and_the_frontier_unchanged() -> None:
    tracker = SourceTracker("one")
    tracker.read(P0, None)
    fed(tracker, [(P0, 0)])
    chunk = tracker.take(final=False)
    assert chunk is not None
    assert tracker.frontier(P0) is None  # only committed() moves it
    assert tracker.pending == 0


def test_a_second_row_of_one_offset_names_the_option() -> None:
    tracker = SourceTracker("one")
    tracker.read(P0, None)
    fed(tracker, [(P0, 0)])
    with pytest.raises(ConfigError, match="rows_per_source_record") as info:
        tracker.add(P0, 0, "again")
    assert "'many'" in str(info.value)


@pytest.mark.parametrize("per_record", ["one", "many"])
def test_a_decreasing_offset_is_a_shuffle(per_record: str) -> None:
    tracker = SourceTracker(per_record)  # type: ignore[arg-type]
    tracker.read(P0, None)
    fed(tracker, [(P0, 5)])
    with pytest.raises(ConfigError, match="shuffle"):
        tracker.add(P0, 4, "late")


def test_rows_need_the_frontier_read_first() -> None:
    tracker = SourceTracker("one")
    assert not tracker.has_read(P0)
    with pytest.raises(AssertionError):
        tracker.add(P0, 0, "row")


def test_the_option_is_checked() -> None:
    with pytest.raises(ConfigError, match="rows_per_source_record"):
        SourceTracker("several")  # type: ignore[arg-type]


def test_source_record_ids_are_deterministic_and_distinct() -> None:
    a = source_record_id("t", 0, 7)
    assert a == source_record_id("t", 0, 7) and len(a) == 32
    assert len({a, source_record_id("t", 1, 7), source_record_id("t", 0, 7, 0)}) == 3
    assert source_record_id("t", 0, 7, 1) != source_record_id("t", 0, 7, 0)


def test_starting_offsets_resume_each_partition_at_its_frontier_and_the_rest_at_earliest() -> None:
    frontiers = {("clicks", 0): 120, ("clicks", 2): 7}
    partitions = {"clicks": [0, 1, 2]}
    assert starting_offsets(frontiers, partitions) == {"clicks": {"0": 120, "1": -2, "2": 7}}


def test_starting_offsets_refuse_a_frontier_of_a_partition_the_topic_no_longer_has() -> None:
    with pytest.raises(ConfigError, match=r"clicks\[3\]"):
        starting_offsets({("clicks", 3): 5}, {"clicks": [0, 1]})


def test_starting_offsets_refuse_when_nothing_was_committed_by_frontier() -> None:
    with pytest.raises(ConfigError, match="no source frontiers"):
        starting_offsets({}, {"clicks": [0, 1]})


def test_a_chunk_corrected_to_the_sinks_frontiers_drops_what_they_cover() -> None:
    """A store that trusted a frontier unread and found another (StaleFrontier): the chunk's
    rows below the sink's frontier are skipped, the rest committed against it, and a partition
    whose rows are all covered leaves the chunk with the sink's frontier as its own."""
    tracker = SourceTracker("one")
    tracker.read(P0, 10)
    tracker.read(P1, 0)
    fed(tracker, [(P0, 10), (P0, 11), (P0, 12), (P1, 0), (P1, 1)])
    chunk = tracker.take(final=False)
    assert chunk is not None
    fixed = tracker.correct(chunk, {P0: 12, P1: 5})
    assert fixed is not None and fixed.rows == [(P0, 12)]
    assert fixed.expected == {P0: 12} and fixed.next_offsets == {P0: 13}
    assert tracker.skipped == 4 and tracker.frontier(P1) == 5
    fed(tracker, [(P1, 4), (P1, 5)])  # the sink's frontier filters what comes next
    assert tracker.skipped == 5
    tracker.committed(fixed)
    assert tracker.frontier(P0) == 13


def test_a_correction_also_drops_pending_rows_it_covers() -> None:
    tracker = SourceTracker("many")
    tracker.read(P0, 0)
    fed(tracker, [(P0, 0), (P0, 1), (P0, 1)])
    chunk = tracker.take(final=False)  # offset 1's rows stay pending
    assert chunk is not None and chunk.rows == [(P0, 0)]
    assert tracker.correct(chunk, {P0: 2}) is None
    assert tracker.pending == 0 and tracker.skipped == 3
    assert tracker.take(final=True) is None and tracker.frontier(P0) == 2


def test_a_sink_frontier_below_the_one_a_chunk_expects_is_refused() -> None:
    tracker = SourceTracker("one")
    tracker.read(P0, 10)
    fed(tracker, [(P0, 10)])
    chunk = tracker.take(final=False)
    assert chunk is not None
    with pytest.raises(FrontierMovedError, match="below"):
        tracker.correct(chunk, {P0: 4})
