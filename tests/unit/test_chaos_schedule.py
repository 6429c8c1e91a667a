"""``exactlyonce chaos``'s pure parts: the seeded fault schedule (reproducible, the mix the
options ask for, point kills never right after a server fault), the local services a
pipeline's addresses match, and the verdict line and JSON report."""

from __future__ import annotations

import pytest

from exactlyonce.errors import ConfigError
from exactlyonce.integration.chaos.schedule import (
    DRIVER_KILL,
    POINT_KILL,
    SERVER_CLEAN,
    SERVER_HARD,
    SERVER_KINDS,
    check_points,
    fault_mix,
    plan,
)

PG_POINTS = ("before_write", "mid_copy", "after_shard_commit", "after_head")


def test_the_same_seed_gives_the_same_schedule() -> None:
    one = plan(42, 20, PG_POINTS, ("pg", "redis"))
    assert plan(42, 20, PG_POINTS, ("pg", "redis")) == one
    assert plan(43, 20, PG_POINTS, ("pg", "redis")) != one


def test_the_schedule_has_as_many_faults_as_kills_numbered_in_order() -> None:
    for kills in (0, 1, 2, 5, 20, 57):
        faults = plan(7, kills, PG_POINTS, ("pg",))
        assert [f.n for f in faults] == list(range(1, kills + 1))


def test_the_default_mix_is_a_fifth_server_faults_and_a_third_of_the_rest_at_points() -> None:
    faults = plan(5, 20, PG_POINTS, ("pg", "redis"))
    kinds = [f.kind for f in faults]
    assert kinds.count(SERVER_HARD) + kinds.count(SERVER_CLEAN) == 4
    assert kinds.count(POINT_KILL) == 5  # round(16 * 0.3)
    assert kinds.count(DRIVER_KILL) == 11
    assert kinds.count(SERVER_HARD) == kinds.count(SERVER_CLEAN) == 2  # hard and clean in turn


def test_without_servers_or_points_every_fault_is_a_random_driver_kill() -> None:
    assert {f.kind for f in plan(1, 9)} == {DRIVER_KILL}


def test_server_faults_can_be_set_or_turned_off() -> None:
    assert fault_mix(10, 4, 2, server_faults=0).servers == 0
    assert fault_mix(10, 4, 2, server_faults=7).servers == 7
    assert fault_mix(10, 4, 2, server_faults=7).points == 1
    with pytest.raises(ConfigError, match="--server-faults"):
        fault_mix(3, 4, 2, server_faults=4)
    with pytest.raises(ConfigError, match="no local server"):
        fault_mix(3, 4, 0, server_faults=1)
    with pytest.raises(ConfigError, match="--kills"):
        fault_mix(-1, 4, 0)


def test_small_schedules_still_have_one_of_each_sort_they_can() -> None:
    assert fault_mix(2, 4, 1) == fault_mix(2, 4, 1)
    mix = fault_mix(3, 4, 1)
    assert (mix.servers, mix.points, mix.random_kills) == (1, 1, 1)
    assert fault_mix(1, 4, 1).servers == 0  # one fault: a driver kill


def test_the_points_are_used_evenly() -> None:
    faults = plan(3, 40, PG_POINTS, ())
    points = [f.point for f in faults if f.kind == POINT_KILL]
    assert len(points) == 12
    assert {points.count(p) for p in PG_POINTS} == {3}
    few = [f.point for f in plan(3, 6, PG_POINTS, ()) if f.kind == POINT_KILL]
    assert len(few) == len(set(few)) == 2


def test_a_point_kill_never_follows_a_server_fault() -> None:
    for seed in range(200):
        faults = plan(seed, 12, PG_POINTS, ("pg", "redis", "kafka"), server_faults=5)
        for before, after in zip(faults, faults[1:], strict=False):
            assert not (before.kind in SERVER_KINDS and after.kind == POINT_KILL), (seed, faults)


def test_server_faults_rotate_over_the_servers_given() -> None:
    faults = plan(9, 10, (), ("pg", "redis"), server_faults=4)
    servers = [f.server for f in faults if f.kind in SERVER_KINDS]
    assert sorted(servers) == ["pg", "pg", "redis", "redis"]
    assert all(0.5 <= f.down_s <= 3.0 for f in faults if f.kind in SERVER_KINDS)


def test_waits_are_within_their_bounds() -> None:
    for fault in plan(11, 50, PG_POINTS, ("pg",)):
        if fault.kind != POINT_KILL:
            assert 1 <= fault.epochs <= 3 and 0.0 <= fault.delay_s <= 2.0
        assert fault.describe()


def test_points_are_checked() -> None:
    assert check_points(["mid_copy", "before_write", "mid_copy"]) == ("mid_copy", "before_write")
    with pytest.raises(ConfigError, match="rewind's"):
        check_points(["rewind_mid_delete"])
    with pytest.raises(ConfigError, match="--points.*unknown"):
        check_points(["nowhere"])
