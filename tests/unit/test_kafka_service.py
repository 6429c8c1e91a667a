"""The genuine Kafka broker's settings: the local service and docker compose agree."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from exactlyonce.integration.jars import KAFKA_BROKER, SPARK_CONNECTORS, folder
from exactlyonce.integration.lab.services import kafka

ROOT = Path(__file__).resolve().parents[2]


def compose_kafka_settings() -> dict[str, str]:
    """The apache/kafka image's KAFKA_* variables as broker property names."""
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    env = compose["services"]["kafka"]["environment"]
    return {
        key.removeprefix("KAFKA_").lower().replace("_", "."): str(value)
        for key, value in env.items()
    }


def test_docker_compose_gives_the_broker_every_setting_the_tests_used() -> None:
    compose = compose_kafka_settings()
    differ = {k: (v, compose.get(k)) for k, v in kafka.SETTINGS.items() if compose.get(k) != v}
    assert not differ, f"docker-compose.yml kafka differs from SETTINGS: {differ}"


def test_the_compose_image_is_the_version_the_pom_resolves() -> None:
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    pom = KAFKA_BROKER.pom.read_text()
    version = compose["services"]["kafka"]["image"].rpartition(":")[2]
    assert f"<kafka.version>{version}</kafka.version>" in pom


def test_server_properties_listen_on_loopback_ports(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("EXACTLYONCE_KAFKA_PORT", "7001")
    monkeypatch.setenv("EXACTLYONCE_KAFKA_CONTROLLER_PORT", "7002")
    props = dict(
        line.split("=", 1) for line in kafka.server_properties(tmp_path / "d").splitlines()
    )
    assert props["listeners"] == "PLAINTEXT://127.0.0.1:7001,CONTROLLER://127.0.0.1:7002"
    assert props["advertised.listeners"] == "PLAINTEXT://127.0.0.1:7001"
    assert props["controller.quorum.bootstrap.servers"] == "127.0.0.1:7002"
    assert props["log.dirs"] == str(tmp_path / "d")


def test_jar_folders_are_named_by_version_and_pom(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("EXACTLYONCE_JARS", str(tmp_path))
    a = folder(SPARK_CONNECTORS.with_properties(**{"spark.version": "4.2.0"}))
    b = folder(SPARK_CONNECTORS.with_properties(**{"spark.version": "4.1.1"}))
    assert a.parent == tmp_path and a.name.startswith("spark-connectors-4.2.0-")
    assert a != b
