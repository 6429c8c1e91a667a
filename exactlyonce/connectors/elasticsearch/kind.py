"""Elasticsearch's entry in the sink registry (:mod:`exactlyonce.connectors.registry`)."""

from __future__ import annotations

from typing import Any
from urllib.parse import SplitResult, unquote

from exactlyonce.connectors.base.kind import ChaosTraits, SinkKind, UrlTraits
from exactlyonce.connectors.elasticsearch.config import ElasticsearchSinkConfig


def _addresses(config: ElasticsearchSinkConfig) -> list[str]:
    return list(config.hosts)


def _proxy_refusal(config: ElasticsearchSinkConfig) -> str | None:
    if len(config.hosts) != 1:
        return "the sink has several hosts (the proxy stands in front of one)"
    return None


def _from_url(parts: SplitResult, rest: str) -> dict[str, Any]:
    """``elasticsearch://user:pw@host:9200`` (``elasticsearch+https://`` for TLS): the host
    as an HTTP(S) URL, the user and password as settings of their own."""
    scheme = "https" if parts.scheme.lower().endswith("+https") else "http"
    host = parts.netloc.rpartition("@")[2]
    values: dict[str, Any] = {"hosts": [f"{scheme}://{host}{parts.path.rstrip('/')}"]}
    if parts.username is not None:
        values["username"] = unquote(parts.username)
    if parts.password is not None:
        values["password"] = unquote(parts.password)
    return values


KIND = SinkKind(
    name="elasticsearch",
    config=ElasticsearchSinkConfig,
    sink="exactlyonce.connectors.elasticsearch.sink:ElasticsearchSink",
    audit="exactlyonce.connectors.elasticsearch.audit:read_elasticsearch",
    datasource="exactlyonce.connectors.elasticsearch.datasource:DATASOURCE",
    drain="exactlyonce.connectors.elasticsearch.drain:EsDrainTarget",
    chaos=ChaosTraits(default_port=9200, addresses=_addresses, proxy_refusal=_proxy_refusal),
    url=UrlTraits(
        ("elasticsearch", "elasticsearch+https"), ("hosts", "username", "password"), _from_url
    ),
)
