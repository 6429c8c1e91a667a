"""PostgreSQL's entry in the sink registry (:mod:`exactlyonce.connectors.registry`)."""

from __future__ import annotations

from urllib.parse import SplitResult

from exactlyonce.connectors.base.kind import ChaosTraits, SinkKind, UrlTraits
from exactlyonce.connectors.postgres.config import PostgresSinkConfig


def _addresses(config: PostgresSinkConfig) -> list[str]:
    return [config.dsn.get_secret_value()]


def _from_url(parts: SplitResult, rest: str) -> dict[str, str]:
    """The libpq URL itself, without our settings (its own options stay)."""
    return {"dsn": parts._replace(query=rest, fragment="").geturl()}


KIND = SinkKind(
    name="postgres",
    config=PostgresSinkConfig,
    sink="exactlyonce.connectors.postgres.sink:PostgresSink",
    audit="exactlyonce.connectors.postgres.audit:read_postgres",
    datasource="exactlyonce.connectors.postgres.datasource:DATASOURCE",
    drain="exactlyonce.connectors.postgres.drain:PgDrainTarget",
    chaos=ChaosTraits(
        default_port=5432,
        addresses=_addresses,
        protocol="postgres",
        address_field="dsn",
        commit_request=b"COMMIT",
        mid_point="mid_copy",
    ),
    url=UrlTraits(("postgres", "postgresql"), ("dsn",), _from_url, client_options=True),
)
