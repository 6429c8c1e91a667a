"""Redis's entry in the sink registry (:mod:`exactlyonce.connectors.registry`)."""

from __future__ import annotations

from urllib.parse import SplitResult

from exactlyonce.connectors.base.kind import ChaosTraits, SinkKind, UrlTraits
from exactlyonce.connectors.redis.config import RedisSinkConfig


def _addresses(config: RedisSinkConfig) -> list[str]:
    return [config.url.get_secret_value()]


def _from_url(parts: SplitResult, rest: str) -> dict[str, str]:
    """redis-py's URL itself, without our settings (its own options stay)."""
    return {"url": parts._replace(query=rest, fragment="").geturl()}


KIND = SinkKind(
    name="redis",
    config=RedisSinkConfig,
    sink="exactlyonce.connectors.redis.sink:RedisSink",
    audit="exactlyonce.connectors.redis.audit:read_redis",
    datasource="exactlyonce.connectors.redis.datasource:DATASOURCE",
    drain="exactlyonce.connectors.redis.drain:RedisDrainTarget",
    chaos=ChaosTraits(
        default_port=6379,
        addresses=_addresses,
        protocol="redis",
        address_field="url",
        commit_request=b"EVALSHA",
        mid_point="mid_write",
    ),
    url=UrlTraits(("redis", "rediss"), ("url",), _from_url, client_options=True, needs_host=False),
)
