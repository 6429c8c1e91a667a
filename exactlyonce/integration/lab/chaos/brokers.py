"""Broker failovers: a server fault of ``exactlyonce chaos`` on the 3-node Kafka cluster of
``exactlyonce services`` (``kafka3``: three KRaft nodes, replication 3,
``min.insync.replicas=2``; :mod:`exactlyonce.integration.lab.services.kafka_cluster`).

Restarting the whole cluster would be an outage, not a failover, so a server fault there
strikes the one node that holds a ROLE at that moment: the ``leader`` of a partition of the
topic the runs write, or the KRaft quorum's active ``controller`` (the schedule gives the
cluster's faults these roles in turn). The node is SIGKILLed (hard) or stopped cleanly, kept
down, started again on its data, and the fault is done once every partition has all its
replicas in sync again; meanwhile the other two nodes elect a new leader or controller and
keep two replicas in sync, so ``acks=all`` writes and transactions go on.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from exactlyonce.integration.envfile import home_dir
from exactlyonce.integration.lab.services import kafka_cluster

SERVICE = "kafka3"
LEADER = "leader"
CONTROLLER = "controller"
ROLES = (LEADER, CONTROLLER)


@dataclass(frozen=True)
class Failover:
    """One failover done: the node that held ``role``, its pids before and after, and how
    long from the kill (or stop) until it was back in sync."""

    node: int
    role: str
    topic: str
    old_pid: int
    new_pid: int
    down_s: float

    def describe(self) -> str:
        """``node 2 (leader of topic t, pid 41)`` or ``node 3 (the active controller, ...)``."""
        held = f"leader of topic {self.topic}" if self.role == LEADER else "the active controller"
        return f"node {self.node} ({held}, pid {self.old_pid})"


def pick_broker(role: str, leaders: Mapping[int, int], controller: int) -> int:
    """The node to fail over for ``role``: the active ``controller``; or, for ``leader``, the
    node that leads the most partitions in ``leaders`` (partition -> node, -1: none),
    preferring one that is not the controller, so the two roles strike different nodes when
    they can (ties: the lowest id)."""
    if role == CONTROLLER:
        return controller
    if role != LEADER:
        raise ValueError(f"no broker role {role!r}; known: {', '.join(ROLES)}")
    led = Counter(node for node in leaders.values() if node >= 0)
    if not led:
        raise RuntimeError("kafka3: no partition of the topic has a leader")
    return min(led, key=lambda node: (node == controller, -led[node], node))


def fail_over(
    role: str, topic: str, *, hard: bool, down_s: float, home: Path | None = None
) -> Failover:
    """SIGKILL (``hard``) or stop the node of ``home``'s cluster that holds ``role`` now (for
    ``leader``: of ``topic``), keep it down ``down_s`` seconds, start it again and return once
    every partition is back in sync."""
    cluster = kafka_cluster.cluster(home_dir(home))
    node = pick_broker(role, cluster.leaders(topic), cluster.active_controller())
    began = time.monotonic()
    old = cluster.pid(node)
    if old is None:
        raise RuntimeError(f"kafka3 node {node} is not running")
    if hard:
        cluster.kill(node)
    else:
        cluster.stop_node(node)
    time.sleep(down_s)
    new = cluster.restart(node)
    return Failover(node, role, topic, old, new, time.monotonic() - began)


def cluster_addresses(home: Path | None = None) -> dict[str, str]:
    """host:port -> ``kafka3`` for each node's client listener, when all three nodes of
    ``home``'s cluster run (else nothing: a failover needs the other two)."""
    cluster = kafka_cluster.cluster(home_dir(home))
    if len(cluster.alive()) != len(kafka_cluster.NODES):
        return {}
    return {f"127.0.0.1:{cluster.ports[n].client}": SERVICE for n in kafka_cluster.NODES}
