"""Kafka's entry in the sink registry (:mod:`exactlyonce.connectors.registry`). No buffer
drains into Kafka: it is a Kafka topic already."""

from __future__ import annotations

from urllib.parse import SplitResult

from exactlyonce.connectors.base.kind import ChaosTraits, SinkKind, UrlTraits
from exactlyonce.connectors.kafka.config import KafkaSinkConfig
from exactlyonce.errors import ConfigError


def _addresses(config: KafkaSinkConfig) -> list[str]:
    return [b.strip() for b in config.bootstrap_servers.split(",")]


def _proxy_refusal(config: KafkaSinkConfig) -> str | None:
    return "a Kafka sink's clients reach the brokers the cluster advertises"


def _from_url(parts: SplitResult, rest: str) -> dict[str, str]:
    if parts.username is not None or parts.password is not None:
        raise ConfigError(
            "sink URL",
            "a kafka:// URL takes no user or password: put SASL settings in a pipeline "
            "file's producer_config",
        )
    if parts.path.strip("/"):
        raise ConfigError("sink URL", "a kafka:// URL has no path: give ?topic=")
    return {"bootstrap_servers": parts.netloc}


KIND = SinkKind(
    name="kafka",
    config=KafkaSinkConfig,
    sink="exactlyonce.connectors.kafka.sink:KafkaSink",
    audit="exactlyonce.connectors.kafka.audit:read_kafka",
    datasource="exactlyonce.connectors.kafka.datasource:DATASOURCE",
    chaos=ChaosTraits(
        default_port=9092,
        addresses=_addresses,
        protocol="kafka",
        mid_point="mid_produce",
        committed_point="before_confirm",
        proxy_refusal=_proxy_refusal,
    ),
    url=UrlTraits(("kafka",), ("bootstrap_servers",), _from_url),
)
