"""A sink named by a URL (``exactlyonce heads postgresql://...``): the same config model as
the sink's Python constructor and a pipeline file's ``sink:``, with its settings from the URL.

One scheme per sink; the query string holds the model's own settings by their names (lists
comma-separated); where the destination itself is a URL, the rest of it (user, password,
host, database, the client's own options such as ``sslmode``) is that URL::

    postgresql://user:pw@host:5432/db?table=events          -> dsn (without table=...), table
    redis://:pw@host:6379/0?key_template=ev:{event_id}       -> url, key_template
    kafka://host1:9092,host2:9092?topic=events               -> bootstrap_servers, topic
    elasticsearch://user:pw@host:9200?index=events           -> hosts (http://host:9200),
    elasticsearch+https://...                                   username, password (https)

``postgres://`` and ``rediss://`` are accepted too. ``query_name`` comes from
``?query_name=`` or the command line (``--query-name``); the dedup catalog's Redis from
``--catalog redis://...`` (else ``$EXACTLYONCE_REDIS_URL``; ``?dedup=false`` when the query
runs without one). Record identity (``id_columns``) may be left out: what the URL is for
(heads, shard commits, the catalog) does not depend on it.

Refused, as a :class:`~exactlyonce.errors.ConfigError` naming the field (``?table``,
``sink URL``, ``--catalog``, ``--query-name``): an unknown scheme, a setting given twice, a
setting that is part of the URL itself (``?dsn=``), a secret in the query string
(``?api_key=``: it would be echoed), a nested setting (``producer_config``, ``mapping``: use
a pipeline file), and everything the model refuses. A Kafka URL takes no user or password
(SASL settings go in a pipeline file's ``producer_config``). No message shows the URL; print
it with :func:`exactlyonce.secrets.redact_dsn`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl, urlencode, urlsplit

from exactlyonce.connectors import registry
from exactlyonce.connectors.base.config import SinkConfig
from exactlyonce.connectors.base.kind import SinkKind
from exactlyonce.errors import ConfigError
from exactlyonce.secrets import is_secret_key

if TYPE_CHECKING:
    from urllib.parse import SplitResult

    from exactlyonce.connectors.base import ExactlyOnceSink

URL_FIELD = "sink URL"
_ALWAYS_REFUSED = {
    "type": "the URL's scheme names the sink",
    "redis_url": "give the catalog's Redis with --catalog (or $EXACTLYONCE_REDIS_URL)",
}


def schemes() -> dict[str, SinkKind]:
    """Every sink URL scheme, and the sink it names."""
    return {scheme: kind for kind in registry.kinds() for scheme in kind.url.schemes}


def is_sink_url(target: str) -> bool:
    """Whether a command's target is a sink URL (else it is a pipeline file's path)."""
    return urlsplit(target).scheme.lower() in schemes() and "://" in target


def sink_config_from_url(
    url: str, *, query_name: str | None = None, catalog: str | None = None
) -> SinkConfig:
    """The sink's own config model for ``url`` (see the module docstring)."""
    try:
        parts = urlsplit(url)
    except ValueError:
        raise ConfigError(URL_FIELD, "not a URL") from None
    known = schemes()
    kind = known.get(parts.scheme.lower())
    if kind is None or "://" not in url:
        named = ", ".join(f"{s}://" for s in known)
        raise ConfigError(URL_FIELD, f"unknown scheme {parts.scheme!r}: use one of {named}")
    model = kind.config
    own, rest = _split_query(parts, kind)
    values: dict[str, Any] = {**_from_url(parts, kind, rest), **own}
    values["query_name"] = _query_name(own.get("query_name"), query_name)
    if catalog is not None:
        values["redis_url"] = catalog
    if values.get("id_columns") is None and "id_from" not in values:
        values["id_from"] = "content"  # identity does not matter to what a URL is for
    try:
        return model(**values)
    except ConfigError as exc:
        raise ConfigError(_field_name(exc.field, model), exc.reason) from None


def sink_from_url(
    url: str, *, query_name: str | None = None, catalog: str | None = None
) -> ExactlyOnceSink:
    """The sink ``url`` names, built without preflight (``check=False``: nothing is created)."""
    config = sink_config_from_url(url, query_name=query_name, catalog=catalog)
    try:
        return registry.kind_of(config).sink_class().from_config(config, check=False)
    except ConfigError as exc:
        raise ConfigError(_field_name(exc.field, type(config)), exc.reason) from None


def _split_query(parts: SplitResult, kind: SinkKind) -> tuple[dict[str, Any], str]:
    """The query string's settings of the sink's model (checked), and the rest of it (the
    client's own options), re-encoded."""
    model = kind.config
    own: dict[str, Any] = {}
    rest: list[tuple[str, str]] = []
    for name, value in parse_qsl(parts.query, keep_blank_values=True):
        if name not in model.model_fields and name != "query_name":
            if kind.url.client_options:
                rest.append((name, value))
                continue
            raise ConfigError(f"?{name}", "unknown setting (not allowed here)")
        if name in own:
            raise ConfigError(f"?{name}", "given twice")
        _refuse(name, kind)
        own[name] = _value(name, value, model)
    return own, urlencode(rest)


def _refuse(name: str, kind: SinkKind) -> None:
    model = kind.config
    why = _ALWAYS_REFUSED.get(name)
    if why:
        raise ConfigError(f"?{name}", why)
    if name in kind.url.given:
        raise ConfigError(f"?{name}", "the URL itself gives it (scheme, user, host, path)")
    if is_secret_key(name):
        raise ConfigError(f"?{name}", "a secret in a URL's query string would be echoed")
    annotation = str(model.model_fields[name].annotation) if name in model.model_fields else ""
    if "dict" in annotation:
        raise ConfigError(f"?{name}", "a nested setting: give it in a pipeline file")


def _value(name: str, value: str, model: type[SinkConfig]) -> Any:
    """A query-string value as the model takes it: lists comma-separated; pydantic turns
    ``"3"`` and ``"false"`` into numbers and booleans itself."""
    field = model.model_fields.get(name)
    if field is not None and "tuple" in str(field.annotation):
        return [v.strip() for v in value.split(",") if v.strip()]
    return value


def _from_url(parts: SplitResult, kind: SinkKind, rest: str) -> dict[str, Any]:
    """The settings the URL itself gives: the destination's own URL without our settings."""
    if kind.url.needs_host and not parts.hostname and not parts.path.strip("/"):
        raise ConfigError(URL_FIELD, "names no host")
    return kind.url.settings(parts, rest)


def _query_name(in_url: str | None, given: str | None) -> str:
    if in_url is not None and given is not None and in_url != given:
        raise ConfigError("--query-name", "differs from the URL's ?query_name=: give one")
    name = given if given is not None else in_url
    if name is None:
        raise ConfigError("--query-name", "required with a sink URL (or ?query_name=)")
    return name


def _field_name(field: str, model: type[SinkConfig]) -> str:
    """A model's field as the user gave it: a query-string setting, or a URL part."""
    kind = registry.kind_named(str(model.model_fields["type"].default))
    if field in kind.url.given:
        return URL_FIELD
    if field == "redis_url":
        return "--catalog"
    if field == "query_name":
        return "--query-name"
    return f"?{field}"


__all__ = ["is_sink_url", "schemes", "sink_config_from_url", "sink_from_url"]
