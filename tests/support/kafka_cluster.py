"""A private 3-node genuine Apache Kafka cluster for the failover tests, and who leads what.

:class:`~exactlyonce.integration.lab.services.kafka_cluster.KafkaCluster` (three KRaft nodes,
each a broker and a quorum voter; replication factor 3, ``min.insync.replicas=2``) under a
temp dir, on free ports below the ephemeral range, with a second client listener per node
advertised at a port where a :class:`~exactlyonce.integration.lab.fault_proxy.KafkaFaultProxy`
to it can listen (:meth:`ClusterUnderTest.start_proxies`): a client bootstrapped at
:attr:`~exactlyonce.integration.lab.services.kafka_cluster.KafkaCluster.proxied_bootstrap`
talks to every broker through the proxies, the audits and the brokers' replication go direct.

Who leads what is asked twice, of two sources that must agree: the active controller from the
voters' ``quorum-state`` files and from a ``DescribeQuorum`` request (kafka-python); a
transaction's coordinator from the ``__transaction_state`` partition its id hashes to and from
``FindCoordinator`` (kafka-python's ``describe_transactions``, which also says the
transaction's state: ``Ongoing`` is mid-transaction). Every kill is recorded with the roles the
node held at that moment (:class:`Kill`).

Use the session fixture ``kafka_cluster`` (no import: ``tests/conftest.py`` loads this module
with ``pytest_plugins``): one cluster per session (per pytest-xdist worker), started on first
use, stopped at the session's end. A test calls :meth:`ClusterUnderTest.heal` first: a node an
earlier test left down is started again, and every partition is back in sync.
"""

from __future__ import annotations

import atexit
import shutil
import tempfile
import time
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from exactlyonce.integration.lab.fault_proxy import KafkaFaultProxy
from exactlyonce.integration.lab.services.env import HOST
from exactlyonce.integration.lab.services.kafka_cluster import NODES, KafkaCluster, NodePorts
from tests.support.private_kafka import free_port


@dataclass
class Kill:
    """One SIGKILL of a node: what the job was doing, the roles the node held then."""

    node: int
    pid: int
    where: str
    roles: list[str]
    at: float = field(default_factory=time.monotonic)
    back_s: float | None = None  # from the kill until the restarted node was in sync


def _kafka_python_admin(bootstrap: str) -> Any:
    with warnings.catch_warnings():
        # kafka-python 3.0 loads its protocol schemas with importlib.resources.read_text,
        # which Python 3.11 deprecates; the tests turn warnings into errors.
        warnings.simplefilter("ignore", DeprecationWarning)
        from kafka.admin import KafkaAdminClient

        return KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=15_000)


@dataclass
class ClusterUnderTest:
    """The session's cluster, its fault proxies, and the kills made so far."""

    cluster: KafkaCluster
    kills: list[Kill] = field(default_factory=list)
    proxies: dict[int, KafkaFaultProxy] = field(default_factory=dict)

    @property
    def bootstrap(self) -> str:
        return self.cluster.bootstrap

    def _live_bootstrap(self) -> str:
        return ",".join(f"{HOST}:{self.cluster.ports[n].client}" for n in self.cluster.alive())

    def heal(self) -> None:
        """Every node running and every partition in sync (a test's clean start)."""
        for node in NODES:
            if self.cluster.pid(node) is None:
                self.cluster.restart(node)
        self.cluster.wait_in_sync()

    # -- who leads what, from two sources ------------------------------------------

    def active_controller(self) -> int:
        """The quorum's leader: the voters' state files and ``DescribeQuorum`` agree."""
        from_files = self.cluster.active_controller()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            admin = _kafka_python_admin(self._live_bootstrap())
            try:
                quorum = admin.describe_metadata_quorum()
            finally:
                admin.close()
        leader = int(quorum["topics"][0]["partitions"][0]["leader_id"])
        assert leader == from_files, f"DescribeQuorum says {leader}, the voters' files {from_files}"
        return leader

    def transaction(self, transactional_id: str) -> tuple[int, str]:
        """(coordinator node, state) of ``transactional_id``'s transaction now: the
        coordinator from FindCoordinator agrees with the hash of the id."""
        computed = self.cluster.transaction_coordinator(transactional_id)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            admin = _kafka_python_admin(self._live_bootstrap())
            try:
                found = admin.describe_transactions([transactional_id])[transactional_id]
            finally:
                admin.close()
        assert found.coordinator_id == computed, (
            f"{transactional_id}: FindCoordinator says {found.coordinator_id}, its hash {computed}"
        )
        return computed, str(found.state.name)

    def create_topic(self, name: str, partitions: int, leader: int) -> None:
        """A topic of 3 replicas whose every partition's preferred leader is ``leader`` (the
        two others follow), so one node leads all of it."""
        from confluent_kafka.admin import AdminClient, NewTopic

        others = [n for n in NODES if n != leader]
        replicas = [[leader, *(others if p % 2 == 0 else others[::-1])] for p in range(partitions)]
        admin = AdminClient({"bootstrap.servers": self.bootstrap})
        # librdkafka wants the count with an assignment (its Python docstring says -1).
        topic = NewTopic(name, num_partitions=partitions, replica_assignment=replicas)
        admin.create_topics([topic])[name].result(30)
        self.cluster.wait_until(
            lambda: set(self.cluster.leaders(name).values()) == {leader}, f"{name} led by {leader}"
        )

    # -- faults --------------------------------------------------------------------

    def kill(self, node: int, where: str, roles: list[str]) -> Kill:
        """SIGKILL ``node``; recorded with ``roles``, what it held when it was killed."""
        pid = self.cluster.kill(node)
        done = Kill(node, pid, where, roles)
        self.kills.append(done)
        print(f"killed kafka3 node {node} (pid {pid}) {where}: {', '.join(roles)}", flush=True)
        return done

    def restart(self, kill: Kill) -> None:
        """Start the killed node again on its data; wait until every partition is in sync."""
        self.cluster.restart(kill.node)
        kill.back_s = time.monotonic() - kill.at
        print(f"kafka3 node {kill.node} back in sync {kill.back_s:.1f}s after its kill", flush=True)

    def start_proxies(self) -> dict[int, KafkaFaultProxy]:
        """A Kafka fault proxy in front of each node's ``PROXIED`` listener, on the port the
        node advertises for it."""
        for node in NODES:
            ports = self.cluster.ports[node]
            assert ports.proxied is not None and ports.proxy is not None
            self.proxies[node] = KafkaFaultProxy(HOST, ports.proxied, port=ports.proxy)
        return self.proxies

    def stop_proxies(self) -> None:
        for proxy in self.proxies.values():
            proxy.stop()
        self.proxies.clear()


def _distinct_free_ports(count: int) -> list[int]:
    ports: list[int] = []
    while len(ports) < count:
        candidate = free_port()
        if candidate not in ports:
            ports.append(candidate)
    return ports


def _start() -> ClusterUnderTest:
    """A new cluster on free ports under a new temp directory (about 15 s)."""
    base = Path(tempfile.mkdtemp(prefix="eo-kafka3-"))
    free = _distinct_free_ports(4 * len(NODES))
    ports = {n: NodePorts(*free[4 * i : 4 * i + 4]) for i, n in enumerate(NODES)}
    cluster = ClusterUnderTest(KafkaCluster(base, ports))
    began = time.monotonic()
    cluster.cluster.start()
    print(f"kafka3 cluster {cluster.bootstrap} up in {time.monotonic() - began:.1f}s")
    return cluster


def _stop(cluster: ClusterUnderTest) -> None:
    cluster.stop_proxies()
    cluster.cluster.stop()
    shutil.rmtree(cluster.cluster.base, ignore_errors=True)


@pytest.fixture
def kafka_cluster() -> Iterator[ClusterUnderTest]:
    """A cluster of its own for each test, stopped after it: no leader moved by an earlier
    test's kills, and no idle cluster through the rest of the run (idle, its three JVMs cost
    0.12 of a core, measured on 2 cores: a session-long cluster was 5-10% of a run's CPU).
    Stopped at exit too, if the session dies first."""
    cluster = _start()
    atexit.register(_stop, cluster)
    try:
        yield cluster
    finally:
        atexit.unregister(_stop)
        _stop(cluster)
