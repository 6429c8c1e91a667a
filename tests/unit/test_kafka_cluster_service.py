"""The 3-node Kafka cluster's settings (exactlyonce/integration/lab/services/kafka_cluster.py)
and its answer to "which node coordinates this transactional id"."""

from __future__ import annotations

from pathlib import Path

import pytest

from exactlyonce.integration.lab.services import kafka_cluster
from exactlyonce.integration.lab.services.kafka_cluster import (
    NODES,
    KafkaCluster,
    NodePorts,
    block_ports,
    coordinator_partition,
    java_string_hash,
)


def props(cluster: KafkaCluster, node: int) -> dict[str, str]:
    return dict(line.split("=", 1) for line in cluster.server_properties(node).splitlines())


def test_every_node_replicates_three_times_and_votes(tmp_path: Path) -> None:
    cluster = KafkaCluster(tmp_path, block_ports(7000))
    voters = "1@127.0.0.1:7003,2@127.0.0.1:7004,3@127.0.0.1:7005"
    for node in NODES:
        p = props(cluster, node)
        assert p["node.id"] == str(node)
        assert p["process.roles"] == "broker,controller"
        assert p["controller.quorum.voters"] == voters
        assert p["log.dirs"] == str(tmp_path / f"node{node}" / "data")
        for key in ("default.replication.factor", "offsets.topic.replication.factor"):
            assert p[key] == "3"
        assert p["transaction.state.log.replication.factor"] == "3"
        assert p["min.insync.replicas"] == p["transaction.state.log.min.isr"] == "2"
        assert p["unclean.leader.election.enable"] == "false"
    assert cluster.bootstrap == "127.0.0.1:7000,127.0.0.1:7001,127.0.0.1:7002"


def test_a_proxied_listener_is_advertised_at_its_proxy(tmp_path: Path) -> None:
    cluster = KafkaCluster(
        tmp_path, {n: NodePorts(100 + n, 200 + n, 300 + n, 400 + n) for n in NODES}
    )
    p = props(cluster, 2)
    assert p["listeners"] == (
        "PLAINTEXT://127.0.0.1:102,CONTROLLER://127.0.0.1:202,PROXIED://127.0.0.1:302"
    )
    assert p["advertised.listeners"] == "PLAINTEXT://127.0.0.1:102,PROXIED://127.0.0.1:402"
    assert "PROXIED:PLAINTEXT" in p["listener.security.protocol.map"]
    assert cluster.proxied_bootstrap == "127.0.0.1:401,127.0.0.1:402,127.0.0.1:403"
    plain = KafkaCluster(tmp_path, {n: NodePorts(100 + n, 200 + n) for n in NODES})
    assert "PROXIED" not in props(plain, 1)["listeners"]


def test_transactional_ids_hash_as_java_does() -> None:
    assert java_string_hash("") == 0
    assert java_string_hash("hello") == 99162322
    assert java_string_hash("é") == 233
    assert java_string_hash("polygenelubricants") == -(1 << 31)  # Integer.MIN_VALUE
    assert coordinator_partition("polygenelubricants", 10) == 0  # Kafka's Utils.abs
    assert coordinator_partition("hello", 10) == 2
    assert coordinator_partition("Aa", 50) == coordinator_partition("BB", 50)  # equal hashes


def test_the_service_uses_a_block_of_ports(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EXACTLYONCE_KAFKA3_PORT", "31900")
    assert kafka_cluster.bootstrap() == "127.0.0.1:31900,127.0.0.1:31901,127.0.0.1:31902"
    ports = block_ports(31900)
    assert sorted(p for n in NODES for p in ports[n].all()) == list(range(31900, 31909))
