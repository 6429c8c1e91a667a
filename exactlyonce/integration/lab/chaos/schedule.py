"""The seeded schedule of faults ``exactlyonce chaos`` injects: pure, the same seed gives the
same schedule (kinds, order, points, servers, waits), so a failed run can be replayed.

Kinds:

- ``driver_kill``: SIGKILL of the run's whole process group (the Spark driver, its JVM and
  Python workers) at a random moment: once the sink's head shows ``epochs`` new epochs,
  ``delay_s`` later;
- ``point_kill``: the same SIGKILL once the run reaches the named crash point ``point``
  (:mod:`exactlyonce.faults`), at the first epoch that gets there;
- ``commit_kill``: the same SIGKILL aimed at the window between a sink commit and Spark's
  commit log: once the run shows ``epochs`` new epochs and ``delay_s`` passed, a watch on
  the destination (a PostgreSQL ``NOTIFY`` from a trigger, a Redis keyspace notification, a
  ``read_committed`` consumer, a polled Elasticsearch count) kills the run the moment its
  next write commit becomes visible;
- ``server_hard`` / ``server_clean``: the local service ``server`` (``pg``, ``redis``,
  ``kafka``) SIGKILLed or stopped cleanly once the run shows ``epochs`` new epochs and
  ``delay_s`` passed, kept down ``down_s``, and started again on its data; on a cluster
  (``kafka3``) the node that holds the role ``target`` then (``leader``, ``controller``:
  the roles in turn, from a seeded start), a failover;
- ``lost_reply`` / ``refuse`` / ``stall``: through the TCP proxy chaos puts in front of the
  sink's server (:mod:`exactlyonce.integration.lab.fault_proxy`), after the same wait: the reply
  to the sink's next commit-like request is lost after the server applied it; new
  connections are refused (and open ones cut) for ``down_s`` seconds; replies are held
  ``down_s`` seconds;
- ``worker_kill``: SIGKILL of the standalone cluster's worker ``target`` (its JVM, its
  executor and their Python workers), after the same wait; it is started again;
- ``drainer_kill``: SIGKILL of a buffered pipeline's drainer process after the same wait
  (and once it drained something); it is started again.

A point kill needs a run of its own, started with the point armed, so it never comes right
after a fault that leaves the run going (a server, proxy, worker or drainer fault): the run
before it is always one that a kill ended.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from exactlyonce.connectors import registry
from exactlyonce.errors import ConfigError
from exactlyonce.faults import POINTS

DRIVER_KILL = "driver_kill"
POINT_KILL = "point_kill"
COMMIT_KILL = "commit_kill"
SERVER_HARD = "server_hard"
SERVER_CLEAN = "server_clean"
LOST_REPLY = "lost_reply"
REFUSE = "refuse"
STALL = "stall"
WORKER_KILL = "worker_kill"
DRAINER_KILL = "drainer_kill"
SERVER_KINDS = (SERVER_HARD, SERVER_CLEAN)
PROXY_KINDS = (LOST_REPLY, REFUSE, STALL)
KINDS = (
    DRIVER_KILL,
    POINT_KILL,
    COMMIT_KILL,
    *SERVER_KINDS,
    *PROXY_KINDS,
    WORKER_KILL,
    DRAINER_KILL,
)
# Kills of the pipeline itself (its driver, its executors, its drainer), not of a server.
PIPELINE_KILL_KINDS = (DRIVER_KILL, POINT_KILL, COMMIT_KILL, WORKER_KILL, DRAINER_KILL)
RUN_KILL_KINDS = (DRIVER_KILL, POINT_KILL, COMMIT_KILL)  # the run ends: its window is judged
LIVE_KINDS = (*SERVER_KINDS, *PROXY_KINDS, WORKER_KILL, DRAINER_KILL)  # the run goes on

# The points a run reaches in its driver (before the tasks, after the head). A standalone
# cluster's executors are started by its workers and do not inherit a run's environment, so
# the points inside a task never fire there.
DRIVER_POINTS = ("before_write", "after_head")
BUFFERED_POINTS = DRIVER_POINTS  # a buffered run writes the buffer topic
SERVER_SHARE = 0.2  # of the faults, by default, when local servers can be restarted
POINT_SHARE = 0.3  # of the driver kills, by default, at named points
COMMIT_SHARE = 0.3  # of the driver kills, by default, aimed at the commit window
MAX_EPOCHS = 3  # a fault waits for 1-3 new epochs first
MAX_DELAY_S = 2.0  # then 0-2 s
DOWN_S = (0.5, 3.0)  # a server stays down this long
PROXY_S = (1.0, 4.0)  # connections refused, or replies held, this long
EXTRA_SHARE = 0.2  # of the faults, by default, for each of proxy, worker and drainer faults


@dataclass(frozen=True)
class Fault:
    """One scheduled fault; ``n`` is its place in the schedule, from 1."""

    n: int
    kind: str
    point: str | None = None
    server: str | None = None
    epochs: int = 1
    delay_s: float = 0.0
    down_s: float = 0.0
    target: str | None = None  # the worker of a worker kill; the role a failover strikes

    def describe(self) -> str:
        """``fault 3/20: point_kill at mid_copy`` (without the ``fault 3/20: ``)."""
        if self.kind == POINT_KILL:
            return f"SIGKILL driver at crash point {self.point}"
        when = f"{self.epochs} epoch(s) + {self.delay_s:.1f} s into the run"
        if self.kind == DRIVER_KILL:
            return f"SIGKILL driver {when}"
        if self.kind == COMMIT_KILL:
            return f"SIGKILL driver as its next commit becomes visible, {when}"
        if self.kind in SERVER_KINDS:
            how = "SIGKILL" if self.kind == SERVER_HARD else "clean stop"
            what = f"{self.server}'s {self.target}" if self.target else self.server
            return f"{how} of {what} {when}, down {self.down_s:.1f} s, restarted"
        return _EXTRA_TEXT[self.kind].format(f=self, when=when)


_EXTRA_TEXT = {
    LOST_REPLY: "lose the sink's reply to its next commit (after the server applied it) {when}",
    REFUSE: "refuse and cut connections to the sink for {f.down_s:.1f} s {when}",
    STALL: "hold the sink's replies {f.down_s:.1f} s {when}",
    WORKER_KILL: "SIGKILL {f.target} (worker, executor, Python workers) {when}, restarted",
    DRAINER_KILL: "SIGKILL the drainer {f.epochs} transaction(s) + {f.delay_s:.1f} s into its "
    "run, restarted",
}


@dataclass(frozen=True)
class Extras:
    """The fault sources beyond driver kills and server restarts this chaos has: the proxy
    kinds it may use, the cluster's workers, a drainer; and how many faults of each (None: a
    fifth of the faults, at least one from 2 faults on)."""

    proxy_kinds: tuple[str, ...] = ()
    proxy_faults: int | None = None
    workers: tuple[str, ...] = ()
    worker_kills: int | None = None
    drainer: bool = False
    drainer_kills: int | None = None


@dataclass(frozen=True)
class Mix:
    """How many faults of each sort a schedule of ``total`` faults has."""

    total: int
    points: int
    servers: int
    proxy: int = 0
    workers: int = 0
    drainer: int = 0
    commits: int = 0

    @property
    def random_kills(self) -> int:
        others = self.points + self.servers + self.proxy + self.workers + self.drainer
        return self.total - others - self.commits


def sink_points(sink: Any, buffered: bool, cluster: bool = False) -> tuple[str, ...]:
    """The write path's named points a run of ``sink`` (its config) reaches under
    ``exactlyonce run``, in order (the registry's :class:`ChaosTraits`); on a standalone
    ``cluster``, the driver's only."""
    points = BUFFERED_POINTS if buffered else registry.kind_of(sink).chaos.write_points()
    return tuple(p for p in points if p in DRIVER_POINTS) if cluster else points


def run_points() -> frozenset[str]:
    """Every named point some run reaches (rewind's are not among them)."""
    found = {p for kind in registry.kinds() for p in kind.chaos.write_points()}
    return frozenset(found | set(BUFFERED_POINTS))


def check_points(points: Sequence[str], field: str = "--points") -> tuple[str, ...]:
    """``points`` if each is a crash point a run reaches; ConfigError naming the others."""
    reached = run_points()
    unknown = [p for p in points if p not in reached]
    if unknown:
        known = set(unknown) <= set(POINTS)
        where = "rewind's or Real-time Mode's, not a micro-batch run's" if known else "unknown"
        raise ConfigError(
            field, f"{', '.join(unknown)}: {where}; a run reaches {', '.join(sorted(reached))}"
        )
    return tuple(dict.fromkeys(points))


def check_proxy_kinds(kinds: Sequence[str], field: str = "--proxy-kinds") -> tuple[str, ...]:
    """``kinds`` if each is a proxy fault kind; ConfigError naming the others."""
    unknown = [k for k in kinds if k not in PROXY_KINDS]
    if unknown:
        raise ConfigError(field, f"{', '.join(unknown)}: not one of {', '.join(PROXY_KINDS)}")
    return tuple(dict.fromkeys(kinds))


def fault_mix(
    total: int,
    points: int,
    servers: int,
    *,
    server_faults: int | None = None,
    extras: Extras = Extras(),  # noqa: B008 (frozen)
    commit_kills: int | None = None,
) -> Mix:
    """The default mix: a fifth of the faults server restarts (at least one from 2 faults
    on, when ``servers`` can be restarted), as many proxy faults, worker kills and drainer
    kills when ``extras`` has them, then of the driver kills left about a third aimed at the
    commit window (at least one) and about a third at named points (at least one, when
    ``points`` exist); the ``extras``' counts, ``server_faults`` and ``commit_kills``
    override the defaults."""
    if total < 0:
        raise ConfigError("--kills", f"must be 0 or more, got {total}")
    if server_faults is None:
        wanted = max(1, round(total * SERVER_SHARE)) if servers and total >= 2 else 0
    elif server_faults < 0 or server_faults > total:
        raise ConfigError("--server-faults", f"must be from 0 to --kills ({total})")
    elif server_faults and not servers:
        raise ConfigError("--server-faults", "no local server of this pipeline can be restarted")
    else:
        wanted = server_faults
    left = total - wanted
    proxy = _extra(total, left, bool(extras.proxy_kinds), extras.proxy_faults, "--proxy-faults")
    left -= proxy
    workers = _extra(total, left, bool(extras.workers), extras.worker_kills, "--worker-kills")
    left -= workers
    drainer = _extra(total, left, extras.drainer, extras.drainer_kills, "--drainer-kills")
    drivers = left - drainer
    if commit_kills is None:
        commits = min(drivers, max(1, round(drivers * COMMIT_SHARE))) if drivers else 0
    elif commit_kills < 0 or commit_kills > drivers:
        raise ConfigError("--commit-kills", f"must be from 0 to the driver kills left ({drivers})")
    else:
        commits = commit_kills
    rest = drivers - commits
    at_points = min(rest, max(1, round(drivers * POINT_SHARE))) if points and rest else 0
    return Mix(total, at_points, wanted, proxy, workers, drainer, commits)


def _extra(total: int, left: int, available: bool, given: int | None, option: str) -> int:
    """How many faults of one extra sort: ``given`` (checked), else the default share."""
    if given is None:
        return min(left, max(1, round(total * EXTRA_SHARE))) if available and total >= 2 else 0
    if given < 0 or given > left:
        raise ConfigError(option, f"must be from 0 to the faults left for it ({left})")
    if given and not available:
        why = {
            "--proxy-faults": "the sink's server has no proxy in front of it",
            "--worker-kills": "there is no standalone cluster (--cluster)",
            "--drainer-kills": "the pipeline has no buffer: section (no drainer)",
        }
        raise ConfigError(option, why[option])
    return given


def plan(
    seed: int,
    kills: int,
    points: Sequence[str] = (),
    servers: Sequence[str] = (),
    *,
    server_faults: int | None = None,
    extras: Extras = Extras(),  # noqa: B008 (frozen)
    commit_kills: int | None = None,
    server_roles: Mapping[str, Sequence[str]] | None = None,
    sink_servers: Sequence[str] = (),
) -> list[Fault]:
    """``kills`` faults from ``seed``: driver kills (random, aimed at the commit window, and
    at ``points``, the points used evenly) shuffled, with server faults on ``servers`` (hard
    and clean in turn, from a seeded start; a server of ``server_roles`` gets its roles in
    turn as the ``target`` of its faults, from a seeded start; ``sink_servers``, the sink's
    own, first: with more server faults than servers, each gets a hard and a clean one),
    then the ``extras``' faults (proxy kinds in turn, workers in turn, from seeded starts),
    each placed where no point kill follows it."""
    rng = random.Random(seed)
    mix = fault_mix(
        kills,
        len(points),
        len(servers),
        server_faults=server_faults,
        extras=extras,
        commit_kills=commit_kills,
    )
    order = list(points)
    rng.shuffle(order)
    kinds: list[tuple[str, str | None]] = [
        (POINT_KILL, order[i % len(order)]) for i in range(mix.points)
    ]
    kinds += [(DRIVER_KILL, None)] * mix.random_kills
    kinds += [(COMMIT_KILL, None)] * mix.commits
    rng.shuffle(kinds)
    _place_servers(rng, kinds, list(servers), mix.servers, sink_servers)
    _place_extras(rng, kinds, extras, mix)
    faults = [_fault(rng, n, kind, target) for n, (kind, target) in enumerate(kinds, 1)]
    return _with_roles(rng, faults, server_roles or {})


def _with_roles(
    rng: random.Random, faults: list[Fault], server_roles: Mapping[str, Sequence[str]]
) -> list[Fault]:
    """Each server fault on a server of ``server_roles`` with that server's roles in turn
    (from a seeded start) as its ``target``."""
    for server, roles in server_roles.items():
        at = [i for i, f in enumerate(faults) if f.kind in SERVER_KINDS and f.server == server]
        start = rng.randrange(len(roles)) if at and roles else 0
        for turn, i in enumerate(at):
            faults[i] = replace(faults[i], target=roles[(start + turn) % len(roles)])
    return faults


def _place_extras(
    rng: random.Random, kinds: list[tuple[str, str | None]], extras: Extras, mix: Mix
) -> None:
    """Insert the proxy faults, worker kills and drainer kills of ``mix``."""
    proxy_start = rng.randrange(len(extras.proxy_kinds)) if mix.proxy else 0
    for i in range(mix.proxy):
        kind = extras.proxy_kinds[(proxy_start + i) % len(extras.proxy_kinds)]
        _insert_live(rng, kinds, (kind, None))
    worker_start = rng.randrange(len(extras.workers)) if mix.workers else 0
    for i in range(mix.workers):
        _insert_live(
            rng, kinds, (WORKER_KILL, extras.workers[(worker_start + i) % len(extras.workers)])
        )
    for _ in range(mix.drainer):
        _insert_live(rng, kinds, (DRAINER_KILL, None))


def _insert_live(
    rng: random.Random, kinds: list[tuple[str, str | None]], fault: tuple[str, str | None]
) -> None:
    """Insert a fault that leaves its run going where the next fault is not a point kill."""
    places = [at for at in range(len(kinds) + 1) if at == len(kinds) or kinds[at][0] != POINT_KILL]
    kinds.insert(rng.choice(places), fault)


def _place_servers(
    rng: random.Random,
    kinds: list[tuple[str, str | None]],
    servers: list[str],
    count: int,
    first: Sequence[str] = (),
) -> None:
    """Insert ``count`` server faults where the next fault is not a point kill: the servers
    in a seeded order, those of ``first`` ahead, each taken in turn, hard and clean in turn."""
    rng.shuffle(servers)
    servers.sort(key=lambda server: server not in first)
    hard_first = rng.random() < 0.5
    for i in range(count):
        hard = ((i // len(servers)) % 2 == 0) == hard_first  # each server's turns alternate
        _insert_live(rng, kinds, (SERVER_HARD if hard else SERVER_CLEAN, servers[i % len(servers)]))


def _fault(rng: random.Random, n: int, kind: str, target: str | None) -> Fault:
    if kind == POINT_KILL:
        return Fault(n, kind, point=target)
    epochs = rng.randint(1, MAX_EPOCHS)
    delay = round(rng.uniform(0.0, MAX_DELAY_S), 2)
    if kind in (DRIVER_KILL, COMMIT_KILL, LOST_REPLY, DRAINER_KILL):
        return Fault(n, kind, epochs=epochs, delay_s=delay)
    if kind == WORKER_KILL:
        return Fault(n, kind, epochs=epochs, delay_s=delay, target=target)
    if kind in PROXY_KINDS:
        return Fault(n, kind, epochs=epochs, delay_s=delay, down_s=round(rng.uniform(*PROXY_S), 2))
    return Fault(
        n, kind, server=target, epochs=epochs, delay_s=delay, down_s=round(rng.uniform(*DOWN_S), 2)
    )
