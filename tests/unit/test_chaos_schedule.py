"""``exactlyonce chaos``'s pure parts: the seeded fault schedule (reproducible, the mix the
options ask for, point kills never right after a server fault), the local services a
pipeline's addresses match, and the verdict line and JSON report."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from exactlyonce.errors import ConfigError
from exactlyonce.integration.lab.chaos.proxy import proxied_address
from exactlyonce.integration.lab.chaos.rewrite import ADDRESS_ENV, rewrite_pipeline
from exactlyonce.integration.lab.chaos.schedule import (
    COMMIT_KILL,
    DRAINER_KILL,
    DRIVER_KILL,
    LIVE_KINDS,
    LOST_REPLY,
    POINT_KILL,
    PROXY_KINDS,
    REFUSE,
    SERVER_CLEAN,
    SERVER_HARD,
    SERVER_KINDS,
    STALL,
    WORKER_KILL,
    Extras,
    check_points,
    check_proxy_kinds,
    fault_mix,
    plan,
)

ALL_EXTRAS = Extras(proxy_kinds=PROXY_KINDS, workers=("worker1", "worker2"), drainer=True)

PG_POINTS = ("before_write", "mid_copy", "after_shard_commit", "after_head")


def test_the_same_seed_gives_the_same_schedule() -> None:
    one = plan(42, 20, PG_POINTS, ("pg", "redis"))
    assert plan(42, 20, PG_POINTS, ("pg", "redis")) == one
    assert plan(43, 20, PG_POINTS, ("pg", "redis")) != one


def test_the_schedule_has_as_many_faults_as_kills_numbered_in_order() -> None:
    for kills in (0, 1, 2, 5, 20, 57):
        faults = plan(7, kills, PG_POINTS, ("pg",))
        assert [f.n for f in faults] == list(range(1, kills + 1))


def test_the_default_mix_is_a_fifth_servers_then_thirds_at_the_window_and_points() -> None:
    faults = plan(5, 20, PG_POINTS, ("pg", "redis"))
    kinds = [f.kind for f in faults]
    assert kinds.count(SERVER_HARD) + kinds.count(SERVER_CLEAN) == 4
    assert kinds.count(COMMIT_KILL) == 5  # round(16 * 0.3)
    assert kinds.count(POINT_KILL) == 5  # round(16 * 0.3)
    assert kinds.count(DRIVER_KILL) == 6
    assert kinds.count(SERVER_HARD) == kinds.count(SERVER_CLEAN) == 2  # hard and clean in turn


def test_without_servers_or_points_every_fault_is_a_driver_kill() -> None:
    assert {f.kind for f in plan(1, 9)} == {DRIVER_KILL, COMMIT_KILL}
    assert {f.kind for f in plan(1, 9, commit_kills=0)} == {DRIVER_KILL}


def test_commit_kills_are_at_least_one_by_default_and_can_be_set() -> None:
    assert fault_mix(1, 0, 0).commits == 1
    assert fault_mix(10, 4, 0, commit_kills=7).commits == 7
    assert fault_mix(10, 4, 0, commit_kills=7).points == 3  # round(10 * 0.3), of 3 left
    assert fault_mix(0, 4, 0).commits == 0
    with pytest.raises(ConfigError, match="--commit-kills"):
        fault_mix(4, 0, 1, commit_kills=4)  # one of the 4 is a server restart
    described = [f.describe() for f in plan(2, 4, commit_kills=4)]
    assert all(d.startswith("SIGKILL driver as its next commit becomes visible") for d in described)


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
    assert (mix.servers, mix.commits, mix.points, mix.random_kills) == (1, 1, 1, 0)
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


def test_the_sinks_own_server_gets_a_hard_and_a_clean_restart_whatever_the_seed() -> None:
    for servers in (("redis", "kafka", "redis-aof"), ("redis", "redis-aof")):
        for seed in range(100):
            faults = plan(seed, 12, (), servers, server_faults=4, sink_servers=("redis-aof",))
            kinds = sorted(f.kind for f in faults if f.server == "redis-aof")
            assert kinds == sorted(SERVER_KINDS), (servers, seed, faults)


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


def test_without_extras_a_seed_gives_the_schedule_it_gave_before_them() -> None:
    faults = plan(42, 20, PG_POINTS, ("pg", "redis"))
    assert faults == plan(42, 20, PG_POINTS, ("pg", "redis"), extras=Extras())
    assert not {f.kind for f in faults} - {DRIVER_KILL, POINT_KILL, COMMIT_KILL, *SERVER_KINDS}


def test_each_extra_sort_gets_a_fifth_by_default_and_can_be_set() -> None:
    mix = fault_mix(20, 4, 1, extras=ALL_EXTRAS)
    assert (mix.servers, mix.proxy, mix.workers, mix.drainer) == (4, 4, 4, 4)
    assert (mix.commits, mix.points, mix.random_kills) == (1, 1, 2)
    small = fault_mix(2, 0, 0, extras=ALL_EXTRAS)
    assert (small.proxy, small.workers, small.drainer, small.random_kills) == (1, 1, 0, 0)
    given = Extras(proxy_kinds=(LOST_REPLY,), proxy_faults=3, workers=("w",), worker_kills=0)
    assert (fault_mix(5, 0, 0, extras=given).proxy, fault_mix(5, 0, 0, extras=given).workers) == (
        3,
        0,
    )
    with pytest.raises(ConfigError, match="--proxy-faults.*no proxy"):
        fault_mix(5, 0, 0, extras=Extras(proxy_faults=1))
    with pytest.raises(ConfigError, match="--worker-kills.*--cluster"):
        fault_mix(5, 0, 0, extras=Extras(worker_kills=1))
    with pytest.raises(ConfigError, match="--drainer-kills.*buffer"):
        fault_mix(5, 0, 0, extras=Extras(drainer_kills=1))
    with pytest.raises(ConfigError, match="--proxy-faults.*from 0 to"):
        fault_mix(3, 0, 1, server_faults=2, extras=Extras(PROXY_KINDS, proxy_faults=2))


def test_extras_rotate_their_kinds_and_workers_and_never_precede_a_point_kill() -> None:
    for seed in range(100):
        extras = Extras(
            proxy_kinds=(LOST_REPLY, REFUSE),
            proxy_faults=4,
            workers=("worker1", "worker2"),
            worker_kills=2,
            drainer=True,
            drainer_kills=1,
        )
        faults = plan(seed, 12, PG_POINTS, ("pg",), server_faults=1, extras=extras)
        kinds = [f.kind for f in faults]
        assert kinds.count(LOST_REPLY) == kinds.count(REFUSE) == 2 and STALL not in kinds
        assert sorted(f.target for f in faults if f.kind == WORKER_KILL) == ["worker1", "worker2"]
        assert kinds.count(DRAINER_KILL) == 1
        for before, after in zip(faults, faults[1:], strict=False):
            assert not (before.kind in LIVE_KINDS and after.kind == POINT_KILL), (seed, faults)
        for f in faults:
            assert f.describe()
            if f.kind in (REFUSE, STALL):
                assert 1.0 <= f.down_s <= 4.0


def test_proxy_kinds_are_checked() -> None:
    assert check_proxy_kinds(["refuse", "lost_reply", "refuse"]) == ("refuse", "lost_reply")
    with pytest.raises(ConfigError, match="--proxy-kinds.*pause"):
        check_proxy_kinds(["pause"])


def test_the_sink_address_through_the_proxy_keeps_all_but_host_and_port() -> None:
    assert (
        proxied_address("postgresql://u:p%40w@db.example:5433/app?sslmode=disable", 7000)
        == "postgresql://u:p%40w@127.0.0.1:7000/app?sslmode=disable"
    )
    assert proxied_address("redis://127.0.0.1:6379/2", 7001) == "redis://127.0.0.1:7001/2"
    assert proxied_address("dbname=app host=db port=5433 user=u password=s", 7002) == (
        "dbname=app user=u password=s host=127.0.0.1 port=7002"
    )
    assert proxied_address("http://es:9200", 7003) == "http://127.0.0.1:7003"
    assert proxied_address("es:9200", 7004) == "127.0.0.1:7004"


def test_the_runs_pipeline_file_names_the_proxied_address_by_variable(tmp_path: Path) -> None:
    original = tmp_path / "p.yaml"
    original.write_text(
        "query_name: q\nsink:\n  type: postgres\n  dsn: ${PG_DSN}\n  table: t\n"
        "spark:\n  conf: {a: b}\n"
    )
    secret = "postgresql://u:s3cret@127.0.0.1:7000/db"
    path, env = rewrite_pipeline(
        str(original), tmp_path / "out.yaml", sink_address=secret, master="spark://127.0.0.1:1"
    )
    text = Path(path).read_text()
    assert env == {ADDRESS_ENV: secret} and "s3cret" not in text
    data = yaml.safe_load(text)
    assert data["sink"]["dsn"] == "${" + ADDRESS_ENV + "}" and data["sink"]["table"] == "t"
    assert data["spark"] == {"conf": {"a": "b"}, "master": "spark://127.0.0.1:1"}
    assert rewrite_pipeline(str(original), tmp_path / "none.yaml") == (str(original), {})


def test_a_clusters_server_faults_take_its_roles_in_turn_and_others_none() -> None:
    roles = {"kafka3": ("leader", "controller")}
    for seed in range(30):
        faults = plan(seed, 12, PG_POINTS, ("kafka3", "redis"), server_faults=6, server_roles=roles)
        cluster = [f.target for f in faults if f.kind in SERVER_KINDS and f.server == "kafka3"]
        assert len(cluster) == 3 and None not in cluster
        assert all(a != b for a, b in zip(cluster, cluster[1:], strict=False))  # in turn
        assert all(f.target is None for f in faults if f.server == "redis")
    fault = next(f for f in plan(3, 6, (), ("kafka3",), server_roles=roles) if f.target)
    assert f"of kafka3's {fault.target} " in fault.describe()
    # the roles take their turns after the rest is drawn: the schedule is otherwise the same
    bare = plan(5, 12, PG_POINTS, ("kafka3",), server_faults=4)
    given = plan(5, 12, PG_POINTS, ("kafka3",), server_faults=4, server_roles=roles)
    assert [replace(f, target=None) for f in given] == bare


@pytest.mark.parametrize(
    ("role", "leaders", "controller", "node"),
    [
        ("controller", {0: 1, 1: 2}, 3, 3),
        ("leader", {0: 1, 1: 2}, 3, 1),  # neither leader is the controller: the lowest id
        ("leader", {0: 2, 1: 3, 2: 3}, 1, 3),  # the node leading the most partitions
        ("leader", {0: 3, 1: 3, 2: 2}, 3, 2),  # a leader that is not the controller first
        ("leader", {0: 3, 1: -1}, 3, 3),  # the controller when it alone leads
    ],
)
def test_a_failover_strikes_the_broker_that_holds_its_role(
    role: str, leaders: dict[int, int], controller: int, node: int
) -> None:
    from exactlyonce.integration.lab.chaos.brokers import pick_broker

    assert pick_broker(role, leaders, controller) == node


def test_a_failover_without_a_leader_or_with_an_unknown_role_refuses() -> None:
    from exactlyonce.integration.lab.chaos.brokers import pick_broker

    with pytest.raises(RuntimeError, match="no partition of the topic has a leader"):
        pick_broker("leader", {0: -1}, 1)
    with pytest.raises(ValueError, match="no broker role 'follower'"):
        pick_broker("follower", {0: 1}, 1)


def test_a_failover_names_the_node_and_the_role_it_held() -> None:
    from exactlyonce.integration.lab.chaos.brokers import Failover

    assert Failover(2, "leader", "t", 41, 52, 9.0).describe() == (
        "node 2 (leader of topic t, pid 41)"
    )
    assert Failover(3, "controller", "t", 43, 54, 9.0).describe() == (
        "node 3 (the active controller, pid 43)"
    )
