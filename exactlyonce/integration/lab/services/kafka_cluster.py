"""A 3-node genuine Apache Kafka cluster (KRaft), started on demand, that tests can break.

The same jars as the single broker (:mod:`.kafka`), three JVMs, each a broker and a controller
(``process.roles=broker,controller``): three quorum voters, so the active controller can fail
over, and three replicas of every topic with ``min.insync.replicas=2``, so a partition keeps a
leader and ``acks=all`` writes go on with one node down. Internal topics (consumer offsets,
transaction state) are replicated the same way (:data:`SETTINGS`). Each node listens on its own
ports (:class:`NodePorts`), keeps its data under ``<base>/node<N>/data`` (kept across
``kill``/``restart``) and logs to ``<base>/node<N>/kafka.log``.

Not in ``make services``: ``python -m exactlyonce.integration.lab.services up --only kafka3``
starts it under ``<home>/kafka3`` on a block of 9 ports from ``EXACTLYONCE_KAFKA3_PORT``
(19100: clients 19100-19102, controllers 19103-19105, the nodes' second listeners 19106-19108,
see :func:`block_ports`); the tests start their own on free ports
(``tests/support/kafka_cluster.py``).

:class:`KafkaCluster` also answers who does what now: a partition's leader
(:meth:`KafkaCluster.leaders`), the active controller (:meth:`KafkaCluster.active_controller`,
from the quorum voters' own state files), a ``transactional.id``'s coordinator
(:meth:`KafkaCluster.transaction_coordinator`), and breaks it: :meth:`KafkaCluster.kill`
(SIGKILL one node by node id), :meth:`KafkaCluster.restart`.

Each node may have a second client listener, ``PROXIED``, advertised at another port (where a
:class:`~exactlyonce.integration.lab.fault_proxy.FaultProxy` to it listens): a client
bootstrapped there reaches every broker through the proxies, while the brokers replicate
among themselves, and every other client connects, directly.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from exactlyonce.integration.jars import KAFKA_BROKER, classpath, require_java
from exactlyonce.integration.lab.services import kafka
from exactlyonce.integration.lab.services.env import HOST, port
from exactlyonce.integration.lab.services.processes import (
    EXIT_POLL,
    START_POLL,
    check,
    log_tail,
    pid_alive,
    poll_until,
    read_pid,
    run,
    signal_and_wait,
    spawn_detached,
    tcp_open,
)

NODES: tuple[int, ...] = (1, 2, 3)
PROCESS_NAME = kafka.PROCESS_NAME
CLUSTER_ID = "kDp3QnVbRXm1bN0Lc3N0ZQ"
# Small heaps, C1 only: three JVMs share a small machine with the tests' Spark JVMs.
JVM_OPTIONS = ("-Xmx384m", "-XX:TieredStopAtLevel=1", "-XX:+UseG1GC", "-Djava.awt.headless=true")
START_TIMEOUT_S = 180.0
TRANSACTION_STATE_TOPIC = "__transaction_state"

# Kafka's replication settings for production: three replicas, two in sync for a write to be
# acknowledged, for data and internal topics alike. Failure detection is a little faster than
# the defaults (a SIGKILLed broker is fenced, and leaves every ISR, after 6 s of silence instead
# of 9; a stuck follower after 10 s instead of 30), so a test waits seconds, not half a minute.
SETTINGS: dict[str, str] = {
    **kafka.SETTINGS,
    "listener.security.protocol.map": (
        "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT,PROXIED:PLAINTEXT"
    ),
    "default.replication.factor": "3",
    "min.insync.replicas": "2",
    "offsets.topic.replication.factor": "3",
    "transaction.state.log.replication.factor": "3",
    "transaction.state.log.min.isr": "2",
    "unclean.leader.election.enable": "false",
    "broker.session.timeout.ms": "6000",
    "broker.heartbeat.interval.ms": "1000",
    "replica.lag.time.max.ms": "10000",
}

LOG4J2 = kafka.LOG4J2 + (
    "logger.raft.name = org.apache.kafka.raft.QuorumState\nlogger.raft.level = INFO\n"
)


@dataclass(frozen=True)
class NodePorts:
    """One node's ports: ``client`` (PLAINTEXT, advertised as itself: direct clients and
    replication), ``controller`` (the KRaft quorum), and optionally ``proxied`` (a second
    client listener) advertised as ``proxy`` (where a fault proxy to ``proxied`` listens)."""

    client: int
    controller: int
    proxied: int | None = None
    proxy: int | None = None

    def all(self) -> list[int]:
        return [p for p in (self.client, self.controller, self.proxied) if p is not None]


def block_ports(base: int) -> dict[int, NodePorts]:
    """Nine consecutive ports from ``base``: clients, then controllers, then the second
    listeners (advertised at the same port: nothing sits between by default)."""
    return {
        n: NodePorts(base + i, base + 3 + i, base + 6 + i, base + 6 + i)
        for i, n in enumerate(NODES)
    }


def java_string_hash(text: str) -> int:
    """Java's ``String.hashCode()`` (over UTF-16 code units), as a signed 32-bit int."""
    h = 0
    data = text.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + int.from_bytes(data[i : i + 2], "big")) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def coordinator_partition(transactional_id: str, partitions: int) -> int:
    """The ``__transaction_state`` partition whose leader coordinates ``transactional_id``
    (Kafka's ``TransactionStateManager.partitionFor``: ``Utils.abs(hashCode) % count``)."""
    h = java_string_hash(transactional_id)
    return (0 if h == -(1 << 31) else abs(h)) % partitions


@dataclass
class KafkaCluster:
    """Three nodes under ``base`` on ``ports`` (node id -> :class:`NodePorts`)."""

    base: Path
    ports: Mapping[int, NodePorts]

    # -- where things are ----------------------------------------------------------

    def node_dir(self, node: int) -> Path:
        return self.base / f"node{node}"

    def log(self, node: int) -> Path:
        return self.node_dir(node) / "kafka.log"

    def _pidfile(self, node: int) -> Path:
        return self.node_dir(node) / "kafka.pid"

    @property
    def bootstrap(self) -> str:
        """Every node's direct client listener."""
        return ",".join(f"{HOST}:{self.ports[n].client}" for n in NODES)

    @property
    def proxied_bootstrap(self) -> str:
        """Every node's ``PROXIED`` listener, at its advertised (proxy) port."""
        proxies = [self.ports[n].proxy for n in NODES]
        if None in proxies:
            raise RuntimeError("this cluster has no PROXIED listeners")
        return ",".join(f"{HOST}:{p}" for p in proxies)

    def pid(self, node: int) -> int | None:
        """The node's pid if it runs (and is a Kafka JVM), else None."""
        running = read_pid(self._pidfile(node))
        return running if running is not None and pid_alive(running, PROCESS_NAME) else None

    def alive(self) -> list[int]:
        return [n for n in NODES if self.pid(n) is not None]

    def server_properties(self, node: int) -> str:
        p = self.ports[node]
        listeners = [f"PLAINTEXT://{HOST}:{p.client}", f"CONTROLLER://{HOST}:{p.controller}"]
        advertised = [f"PLAINTEXT://{HOST}:{p.client}"]
        if p.proxied is not None and p.proxy is not None:
            listeners.append(f"PROXIED://{HOST}:{p.proxied}")
            advertised.append(f"PROXIED://{HOST}:{p.proxy}")
        voters = ",".join(f"{n}@{HOST}:{self.ports[n].controller}" for n in NODES)
        values = {
            **SETTINGS,
            "node.id": str(node),
            "listeners": ",".join(listeners),
            "advertised.listeners": ",".join(advertised),
            "controller.quorum.voters": voters,
            "log.dirs": str(self.node_dir(node) / "data"),
        }
        return "".join(f"{key}={value}\n" for key, value in values.items())

    # -- start and stop ------------------------------------------------------------

    def start(self) -> None:
        """Start every node that is not running (a majority of voters must run before any
        answers), then wait until the three brokers are registered and unfenced."""
        java, cp = require_java(), classpath(KAFKA_BROKER)
        self._format_once(java, cp)
        for node in NODES:
            if self.pid(node) is None:
                self._spawn(node, java, cp)
        self.wait_until(lambda: self.registered() == set(NODES), "three brokers registered")
        self._create_transaction_log()
        self.wait_in_sync()

    def _create_transaction_log(self) -> None:
        """Brokers create ``__transaction_state`` on the first transactional producer's
        request: make one, so the coordinators are known (and loaded) from the start."""
        from confluent_kafka import Producer

        config = {"bootstrap.servers": self.bootstrap, "transactional.id": "kafka3-start"}
        Producer({**config, "log_level": 0}).init_transactions(START_TIMEOUT_S)

    def restart(self, node: int) -> int:
        """Start a node that was killed or stopped, on its data; return its pid once it is
        registered again and back in sync (every partition's replicas all in its ISR)."""
        if self.pid(node) is not None:
            raise RuntimeError(f"node {node} is running")
        self._spawn(node, require_java(), classpath(KAFKA_BROKER))
        self.wait_until(lambda: node in self.registered(), f"node {node} registered")
        self.wait_in_sync()
        pid = self.pid(node)
        assert pid is not None
        return pid

    def kill(self, node: int) -> int:
        """SIGKILL one node (no shutdown: its leaderships, its controller role, its open
        connections are simply gone); return its pid once the process and its ports are."""
        pid = self.pid(node)
        if pid is None:
            raise RuntimeError(f"node {node} is not running")
        os.kill(pid, signal.SIGKILL)
        self._wait_gone(node, pid)
        return pid

    def stop_node(self, node: int) -> None:
        """A clean shutdown of one node (SIGTERM; SIGKILL after 30 s)."""
        pid = self.pid(node)
        if pid is not None:
            signal_and_wait(pid, PROCESS_NAME, timeout=30.0)
            self._wait_gone(node, pid)
        self._pidfile(node).unlink(missing_ok=True)

    def stop(self) -> None:
        """Stop every node: brokers first, so they need not wait for a controller to
        acknowledge their shutdown; SIGKILL what is left after 30 s. Data is kept."""
        pids = {n: self.pid(n) for n in NODES}
        for pid in pids.values():
            if pid is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGTERM)
        for node, pid in pids.items():
            if pid is not None:
                signal_and_wait(pid, PROCESS_NAME, timeout=30.0)
            self._pidfile(node).unlink(missing_ok=True)

    def _spawn(self, node: int, java: str, cp: str) -> None:
        directory = self.node_dir(node)
        busy = [p for p in self.ports[node].all() if tcp_open(p)]
        if busy:
            raise RuntimeError(f"kafka3 node {node}: port(s) {busy} taken by another process")
        config, logging = directory / "server.properties", directory / "log4j2.properties"
        logging.write_text(LOG4J2)
        argv = [java, *JVM_OPTIONS, f"-Dlog4j2.configurationFile={logging}", "-cp", cp]
        pid = spawn_detached([*argv, PROCESS_NAME, str(config)], self.log(node), cwd=directory)
        self._pidfile(node).write_text(f"{pid}\n")

    def _format_once(self, java: str, cp: str) -> None:
        """Format each node's storage with the cluster id, unless it was formatted for these
        same ports (then its data is kept)."""
        stamp = json.dumps({n: self.ports[n].all() for n in NODES})
        for node in NODES:
            directory = self.node_dir(node)
            directory.mkdir(parents=True, exist_ok=True)
            config = directory / "server.properties"
            config.write_text(self.server_properties(node))
            formatted = directory / "formatted-for"
            data = directory / "data"
            if (
                (data / "meta.properties").is_file()
                and formatted.is_file()
                and formatted.read_text() == stamp
            ):
                continue
            if self.pid(node) is not None:
                raise RuntimeError(f"kafka3 node {node} runs on other ports: stop it first")
            shutil.rmtree(data, ignore_errors=True)
            tool = [java, "-cp", cp, "kafka.tools.StorageTool", "format", "-t", CLUSTER_ID]
            check(run([*tool, "-c", str(config)], timeout=120), f"formatting node {node}")
            formatted.write_text(stamp)

    def _wait_gone(self, node: int, pid: int) -> None:
        """Until the process is gone and its ports closed (not by name: an exiting process's
        command line is empty before its sockets close)."""

        def gone() -> bool:
            return not pid_alive(pid) and not any(tcp_open(p) for p in self.ports[node].all())

        if not poll_until(gone, EXIT_POLL.replace(deadline_s=60.0)):
            raise RuntimeError(f"kafka3 node {node} (pid {pid}) did not go away")
        self._pidfile(node).unlink(missing_ok=True)

    def wait_until(
        self, condition: Callable[[], bool], what: str, timeout: float = START_TIMEOUT_S
    ) -> None:
        """Poll ``condition()`` (errors count as "not yet"); raise naming ``what`` and the
        logs' tails after ``timeout``, or at once when a node that should run died."""
        expected = set(self.alive())

        def ready() -> bool:
            dead = expected - set(self.alive())
            if dead:
                node = min(dead)
                raise RuntimeError(
                    f"kafka3 node {node} exited; log {self.log(node)}:\n{log_tail(self.log(node))}"
                )
            try:
                return bool(condition())
            except Exception:
                return False

        if not poll_until(ready, START_POLL.replace(deadline_s=timeout)):
            tails = "\n".join(f"node {n}:\n{log_tail(self.log(n), 8)}" for n in NODES)
            raise RuntimeError(f"kafka3: not {what} within {timeout:.0f} s\n{tails}")

    # -- who does what now ----------------------------------------------------------

    def metadata(self, timeout: float = 5.0) -> Any:
        """The cluster's metadata (confluent-kafka's ``ClusterMetadata``), from any live
        node."""
        from confluent_kafka.admin import AdminClient

        live = [f"{HOST}:{self.ports[n].client}" for n in self.alive()] or [self.bootstrap]
        admin = AdminClient({"bootstrap.servers": ",".join(live), "log_level": 0})
        return admin.list_topics(timeout=timeout)

    def registered(self) -> set[int]:
        """Brokers the cluster's metadata lists now (registered and not fenced)."""
        return {int(b) for b in self.metadata().brokers}

    def partitions(self, topic: str) -> dict[int, Any]:
        """Partition id -> its metadata (``leader``, ``replicas``, ``isrs``)."""
        meta = self.metadata().topics.get(topic)
        if meta is None or meta.error is not None:
            raise RuntimeError(f"topic {topic}: {getattr(meta, 'error', 'unknown')}")
        return dict(meta.partitions)

    def leaders(self, topic: str) -> dict[int, int]:
        """Partition -> the node id of its leader now (-1: none)."""
        return {p: int(m.leader) for p, m in self.partitions(topic).items()}

    def transaction_coordinator(self, transactional_id: str) -> int:
        """The node that coordinates ``transactional_id``'s transactions now: the leader of
        its ``__transaction_state`` partition."""
        leaders = self.leaders(TRANSACTION_STATE_TOPIC)
        return leaders[coordinator_partition(transactional_id, len(leaders))]

    def active_controller(self) -> int:
        """The KRaft quorum's leader now, from the voters' own ``quorum-state`` files: the
        leader named at the highest epoch. Each voter rewrites its file on every election it
        sees, before acting on it, so a killed leader's stale file has a lower epoch."""
        best = (-1, -1)
        for node in self.alive():
            state = self.node_dir(node) / "data" / "__cluster_metadata-0" / "quorum-state"
            with contextlib.suppress(OSError, ValueError):
                data = json.loads(state.read_text())
                if int(data.get("leaderId", -1)) >= 0:
                    best = max(best, (int(data["leaderEpoch"]), int(data["leaderId"])))
        if best[1] < 0:
            raise RuntimeError("kafka3: no node knows a quorum leader")
        return best[1]

    def in_sync(self, topics: Iterable[str] | None = None) -> bool:
        """Every partition (of ``topics``, default all) has a leader and all its replicas in
        its ISR."""
        meta = self.metadata()
        names = list(topics) if topics is not None else list(meta.topics)
        for name in names:
            topic = meta.topics.get(name)
            if topic is None or topic.error is not None:
                return False
            for part in topic.partitions.values():
                if part.leader < 0 or sorted(part.isrs) != sorted(part.replicas):
                    return False
        return True

    def wait_in_sync(self, timeout: float = 120.0) -> None:
        self.wait_until(self.in_sync, "fully in sync", timeout)


# -- the service ``kafka3`` (manager.py's interface) ---------------------------------------


def cluster(home: Path) -> KafkaCluster:
    """The on-demand cluster under ``<home>/kafka3`` on its port block."""
    return KafkaCluster(home / "kafka3", block_ports(port("kafka3")))


def pid(home: Path) -> int | None:
    """Node 1's pid (the service's status follows the whole cluster through :func:`answers`)."""
    return cluster(home).pid(NODES[0])


def bootstrap() -> str:
    return ",".join(f"{HOST}:{p.client}" for p in block_ports(port("kafka3")).values())


def answers() -> bool:
    """True when a node answers with all three brokers registered."""
    ports = block_ports(port("kafka3"))
    if not any(tcp_open(p.client) for p in ports.values()):
        return False
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap(), "log_level": 0})
    try:
        return len(admin.list_topics(timeout=5).brokers) == len(NODES)
    except KafkaException:
        return False


def start(home: Path) -> None:
    cluster(home).start()


def stop(home: Path) -> None:
    cluster(home).stop()
