"""The registry entry of a sink of the Elasticsearch family: :func:`search_kind` builds it for
a sink's name and config model; audit, data source path and drain target are the family's."""

from __future__ import annotations

from typing import Any
from urllib.parse import SplitResult, unquote

from exactlyonce.connectors.base.kind import ChaosTraits, SinkKind, UrlTraits
from exactlyonce.connectors.search.config import SearchSinkConfig

HERE = "exactlyonce.connectors.search"


def _addresses(config: SearchSinkConfig) -> list[str]:
    return list(config.hosts)


def _proxy_refusal(config: SearchSinkConfig) -> str | None:
    if len(config.hosts) != 1:
        return "the sink has several hosts (the proxy stands in front of one)"
    return None


def _from_url(parts: SplitResult, rest: str) -> dict[str, Any]:
    """``<name>://user:pw@host:9200`` (``<name>+https://`` for TLS): the host as an HTTP(S)
    URL, the user and password as settings of their own."""
    scheme = "https" if parts.scheme.lower().endswith("+https") else "http"
    host = parts.netloc.rpartition("@")[2]
    values: dict[str, Any] = {"hosts": [f"{scheme}://{host}{parts.path.rstrip('/')}"]}
    if parts.username is not None:
        values["username"] = unquote(parts.username)
    if parts.password is not None:
        values["password"] = unquote(parts.password)
    return values


def search_kind(name: str, config: type[SearchSinkConfig], sink: str) -> SinkKind:
    """The kind called ``name`` (also its URL scheme, with ``+https`` for TLS) whose config
    model is ``config`` and whose sink class ``sink`` names (``"module:Class"``)."""
    return SinkKind(
        name=name,
        config=config,
        sink=sink,
        audit=f"{HERE}.audit:read_index",
        datasource=f"{HERE}.datasource:DATASOURCE",
        drain=f"{HERE}.drain:SearchDrainTarget",
        chaos=ChaosTraits(
            default_port=9200,
            addresses=_addresses,
            protocol="elasticsearch",
            address_field="hosts",
            commit_request=b"_bulk",
            mid_point="mid_bulk",
            proxy_refusal=_proxy_refusal,
        ),
        url=UrlTraits((name, f"{name}+https"), ("hosts", "username", "password"), _from_url),
    )
