"""The seeded schedule of faults ``exactlyonce chaos`` injects: pure, the same seed gives the
same schedule (kinds, order, points, servers, waits), so a failed run can be replayed.

Kinds:

- ``driver_kill``: SIGKILL of the run's whole process group (the Spark driver, its JVM and
  Python workers) at a random moment: once the sink's head shows ``epochs`` new epochs,
  ``delay_s`` later;
- ``point_kill``: the same SIGKILL once the run reaches the named crash point ``point``
  (:mod:`exactlyonce.faults`), at the first epoch that gets there;
- ``server_hard`` / ``server_clean``: the local service ``server`` (``pg``, ``redis``,
  ``kafka``) SIGKILLed or stopped cleanly once the run shows ``epochs`` new epochs and
  ``delay_s`` passed, kept down ``down_s``, and started again on its data.

A point kill needs a run of its own, started with the point armed, so it never comes right
after a server fault (whose run may have survived it): the run before it is always one that
a kill ended.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

from exactlyonce.errors import ConfigError
from exactlyonce.faults import POINTS

DRIVER_KILL = "driver_kill"
POINT_KILL = "point_kill"
SERVER_HARD = "server_hard"
SERVER_CLEAN = "server_clean"
KINDS = (DRIVER_KILL, POINT_KILL, SERVER_HARD, SERVER_CLEAN)
SERVER_KINDS = (SERVER_HARD, SERVER_CLEAN)

# The write path's points each sink reaches under `exactlyonce run` (rewind's are not).
SINK_POINTS: dict[str, tuple[str, ...]] = {
    "postgres": ("before_write", "mid_copy", "after_shard_commit", "after_head"),
    "redis": ("before_write", "mid_write", "after_shard_commit", "after_head"),
    "elasticsearch": ("before_write", "mid_bulk", "after_shard_commit", "after_head"),
    "kafka": ("before_write", "mid_produce", "before_confirm", "after_head"),
    "buffered": ("before_write", "after_head"),  # the run writes the buffer topic
}
RUN_POINTS = frozenset(p for points in SINK_POINTS.values() for p in points)
SERVER_SHARE = 0.2  # of the faults, by default, when local servers can be restarted
POINT_SHARE = 0.3  # of the driver kills, by default, at named points
MAX_EPOCHS = 3  # a fault waits for 1-3 new epochs first
MAX_DELAY_S = 2.0  # then 0-2 s
DOWN_S = (0.5, 3.0)  # a server stays down this long


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

    def describe(self) -> str:
        """``fault 3/20: point_kill at mid_copy`` (without the ``fault 3/20: ``)."""
        if self.kind == POINT_KILL:
            return f"SIGKILL driver at crash point {self.point}"
        if self.kind == DRIVER_KILL:
            return f"SIGKILL driver {self.epochs} epoch(s) + {self.delay_s:.1f} s into the run"
        how = "SIGKILL" if self.kind == SERVER_HARD else "clean stop"
        return (
            f"{how} of {self.server} {self.epochs} epoch(s) + {self.delay_s:.1f} s into the "
            f"run, down {self.down_s:.1f} s, restarted"
        )


@dataclass(frozen=True)
class Mix:
    """How many faults of each sort a schedule of ``total`` faults has."""

    total: int
    points: int
    servers: int

    @property
    def random_kills(self) -> int:
        return self.total - self.points - self.servers


def check_points(points: Sequence[str], field: str = "--points") -> tuple[str, ...]:
    """``points`` if each is a crash point a run reaches; ConfigError naming the others."""
    unknown = [p for p in points if p not in RUN_POINTS]
    if unknown:
        where = "rewind's, not a run's" if set(unknown) <= set(POINTS) else "unknown"
        raise ConfigError(
            field, f"{', '.join(unknown)}: {where}; a run reaches {', '.join(sorted(RUN_POINTS))}"
        )
    return tuple(dict.fromkeys(points))


def fault_mix(total: int, points: int, servers: int, *, server_faults: int | None = None) -> Mix:
    """The default mix: a fifth of the faults server restarts (at least one from 2 faults
    on, when ``servers`` can be restarted), then about a third of the driver kills at named
    points (at least one, when ``points`` exist); ``server_faults`` overrides the first."""
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
    drivers = total - wanted
    at_points = min(drivers, max(1, round(drivers * POINT_SHARE))) if points and drivers else 0
    return Mix(total, at_points, wanted)


def plan(
    seed: int,
    kills: int,
    points: Sequence[str] = (),
    servers: Sequence[str] = (),
    *,
    server_faults: int | None = None,
) -> list[Fault]:
    """``kills`` faults from ``seed``: driver kills (random and at ``points``, the points used
    evenly) shuffled, with server faults on ``servers`` (hard and clean in
    turn, from a seeded start) placed where no point kill follows them."""
    rng = random.Random(seed)
    mix = fault_mix(kills, len(points), len(servers), server_faults=server_faults)
    order = list(points)
    rng.shuffle(order)
    kinds: list[tuple[str, str | None]] = [
        (POINT_KILL, order[i % len(order)]) for i in range(mix.points)
    ]
    kinds += [(DRIVER_KILL, None)] * mix.random_kills
    rng.shuffle(kinds)
    _place_servers(rng, kinds, list(servers), mix.servers)
    return [_fault(rng, n, kind, target) for n, (kind, target) in enumerate(kinds, 1)]


def _place_servers(
    rng: random.Random, kinds: list[tuple[str, str | None]], servers: list[str], count: int
) -> None:
    """Insert ``count`` server faults where the next fault is not a point kill."""
    rng.shuffle(servers)
    hard_first = rng.random() < 0.5
    for i in range(count):
        hard = (i % 2 == 0) == hard_first
        fault = (SERVER_HARD if hard else SERVER_CLEAN, servers[i % len(servers)])
        places = [
            at for at in range(len(kinds) + 1) if at == len(kinds) or kinds[at][0] != POINT_KILL
        ]
        kinds.insert(rng.choice(places), fault)


def _fault(rng: random.Random, n: int, kind: str, target: str | None) -> Fault:
    if kind == POINT_KILL:
        return Fault(n, kind, point=target)
    epochs = rng.randint(1, MAX_EPOCHS)
    delay = round(rng.uniform(0.0, MAX_DELAY_S), 2)
    if kind == DRIVER_KILL:
        return Fault(n, kind, epochs=epochs, delay_s=delay)
    return Fault(
        n, kind, server=target, epochs=epochs, delay_s=delay, down_s=round(rng.uniform(*DOWN_S), 2)
    )
