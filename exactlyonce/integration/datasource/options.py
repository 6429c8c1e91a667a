"""Spark's ``.option(...)`` strings as a sink's config: the SAME model the YAML ``sink:``
section and the sink's Python constructor build, so a rule or a default is written once.

Spark hands a data source its options as strings, with lower-cased names (the config
fields are lower-case already). A field that takes text (``table``, ``dsn``) keeps the
string as given; any other (``shards``, ``create_table``, ``dedup``, a list of
``id_columns``) reads it as JSON when it parses, else as the plain string:
``.option("shards", "4")``, ``.option("dedup", '{"expected_ids": 100000}')``,
``.option("id_columns", "event_id")`` or ``'["a", "b"]'``. A problem is a ConfigError naming
the option; no value is ever echoed (a DSN holds a password).

Credentials travel under names Spark redacts. Spark shows a query's options (in plans, its
UI, its event log) unless their names match ``spark.redaction.regex``, by default
``(?i)secret|password|token|access[.]?key``: ``dsn``, ``url``, ``redis_url``, ``api_key`` and
``producer_config`` do not. So every setting may also be given as ``secret.<name>``
(``.option("secret.dsn", dsn)``), which Spark shows as ``*********(redacted)``;
:func:`writer_options` builds a config's options that way. The plain names are still
accepted (a warning names each that carries a credential: :func:`exposed_options`); a setting
given both ways is refused.

Under Spark Connect no option name hides a value: the server logs each query's plan as text
(``SparkListenerConnectOperationStarted`` in the event log, the Connect UI), options and all,
redacted only by ``spark.sql.redaction.string.regex`` (unset by default). There a credential
travels as ``${ENV_VAR}`` (``.option("dsn", "${EXACTLYONCE_PG_DSN}")``), read from the
environment of the Python worker that builds the sink.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import re
from collections.abc import Mapping
from typing import Any

import pydantic_core
from pydantic import BaseModel, SecretStr

from exactlyonce.connectors import registry
from exactlyonce.connectors.base.config import SinkConfig
from exactlyonce.errors import ConfigError
from exactlyonce.integration.envfile import expand
from exactlyonce.secrets import credentials, scrub

log = logging.getLogger("exactlyonce")

SINK_OPTION = "sink"
# Options Spark itself sets or passes through, which are not the sink's.
SPARK_OPTIONS = frozenset({"checkpointlocation", "path", "queryname"})
_TEXT = (str, SecretStr, str | None, SecretStr | None)
# A setting's name behind this prefix: Spark redacts the option (see the module docstring).
SECRET_PREFIX = "secret."
# Spark's default spark.redaction.regex: an option whose name it matches never shows.
SPARK_REDACTED = re.compile(r"(?i)secret|password|token|access[.]?key")


def sink_kind(options: Mapping[str, str]) -> str:
    """The sink the options name. Only a missing or unknown name lists the known sinks: that
    imports every sink's package (and its client library), which a data source call, run in
    a new Python process each time, should not pay for (measured: a quarter of its CPU)."""
    kind = options.get(SINK_OPTION)
    if kind is None:
        known = sorted(registry.names())
        raise ConfigError(SINK_OPTION, f"required: which sink to write, one of {known}")
    try:
        registry.kind_named(kind, SINK_OPTION)
    except ConfigError:
        known = sorted(registry.names())
        raise ConfigError(SINK_OPTION, f"unknown sink {kind!r}; expected one of {known}") from None
    return kind


def sink_config(options: Mapping[str, str]) -> SinkConfig:
    """The sink's config model built from the data source's options (a setting by its name
    or as ``secret.<name>``). A problem is a ConfigError naming the option as given."""
    model = registry.kind_named(sink_kind(options), SINK_OPTION).config
    settings = _settings(options)
    values: dict[str, Any] = {}
    for name, (option, text) in settings.items():
        field = model.model_fields.get(name)
        text_field = field is not None and field.annotation in _TEXT
        values[name] = text if text_field else _decoded(option, text)
    try:
        return model(**values)
    except ConfigError as exc:
        raise _as_given(exc, settings) from None


def _settings(options: Mapping[str, str]) -> dict[str, tuple[str, str]]:
    """Setting name -> (the option that gave it, its text); the sink's own options only."""
    settings: dict[str, tuple[str, str]] = {}
    for option, text in options.items():
        if option == SINK_OPTION or option in SPARK_OPTIONS:
            continue
        name = option.removeprefix(SECRET_PREFIX)
        if name in settings:
            other = settings[name][0]
            raise ConfigError(max(option, other), f"given twice, also as {min(option, other)}")
        settings[name] = (option, _expanded(option, text))
    return settings


def _expanded(option: str, text: str) -> str:
    """The option's text with ``${NAME}`` read from the environment of the process that
    builds the sink (Spark's Python worker): a credential can travel by name, never in the
    query's plan (which Spark Connect logs whole, its redaction by option name aside)."""
    if "$" not in text:
        return text
    value, missing = expand(text, os.environ)
    if missing:
        raise ConfigError(
            option,
            f"environment variable {missing[0]} is not set where the sink runs "
            f"(or use ${{{missing[0]}:-default}})",
        )
    return value


def options_with_credentials(options: Mapping[str, str]) -> list[str]:
    """The options whose own text holds a credential (a password in a DSN, a key), whatever
    their names: under Spark Connect a query's plan, options and all, is logged (the event
    log, the Connect UI) with no redaction by name. Give those as ``${ENV_VAR}``."""
    secrets = credentials(sink_config(options))
    return [option for option, text in options.items() if scrub(text, *secrets) != text]


def _as_given(exc: ConfigError, settings: Mapping[str, tuple[str, str]]) -> ConfigError:
    """The model's error, naming the option as the user gave it (``secret.dsn``)."""
    head, dot, rest = exc.field.partition(".")
    option = settings[head][0] if head in settings else head
    return ConfigError(f"{option}{dot}{rest}", exc.reason)


def writer_options(config: SinkConfig) -> dict[str, str]:
    """The options that build ``config`` again through :func:`sink_config`: ``sink`` and every
    setting given to it, as Spark's strings (text as it is, anything else as JSON).

    Guarantee: an option whose value holds a credential (:func:`exactlyonce.secrets.
    credentials`) has a name Spark's default redaction matches: its own (``password``) or
    ``secret.<name>``. A catalog given as a ``DedupConfig`` object cannot travel as options
    (ConfigError naming ``dedup``): give its sizing as ``dedup`` and its Redis as
    ``redis_url``.
    """
    secrets = credentials(config)
    options = {SINK_OPTION: config.type}
    for name in sorted(config.model_fields_set - {"type"}):
        value = getattr(config, name)
        if value is not None:
            text = _encoded(name, value)
            options[_redacted_name(name, text, secrets)] = text
    return options


def _encoded(name: str, value: Any) -> str:
    if isinstance(value, SecretStr):
        return value.get_secret_value()
    if isinstance(value, str) and _decoded(name, value) == value:
        return value
    if isinstance(value, BaseModel):
        return value.model_dump_json(exclude_none=True)
    if dataclasses.is_dataclass(value):  # a DedupConfig: its connect seam has no text
        raise ConfigError(name, "an object cannot travel as an option: give it as settings")
    return pydantic_core.to_json(value).decode()


def _redacted_name(name: str, text: str, secrets: list[str]) -> str:
    holds = scrub(text, *secrets) != text
    return f"{SECRET_PREFIX}{name}" if holds and not SPARK_REDACTED.search(name) else name


def exposed_options(options: Mapping[str, str]) -> list[str]:
    """The options whose values hold a credential under a name Spark's default redaction
    does not match (``dsn`` with a password): Spark may show them. Names only, in order."""
    return [o for o in options_with_credentials(options) if not SPARK_REDACTED.search(o)]


def warn_exposed(options: Mapping[str, str]) -> None:
    """Log a warning naming each option :func:`exposed_options` finds (never a value)."""
    exposed = exposed_options(options)
    if exposed:
        renamed = ", ".join(f"{SECRET_PREFIX}{option}" for option in exposed)
        log.warning(
            "format('exactlyonce'): option(s) %s hold a credential under a name Spark does "
            "not redact (Spark may show it in plans, its UI and event log): give them as %s",
            ", ".join(exposed),
            renamed,
        )


def _decoded(name: str, text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        if text.lstrip().startswith(("{", "[")):
            raise ConfigError(name, "not valid JSON (a nested value is given as JSON)") from None
        return text


def checkpoint_location(options: Mapping[str, str]) -> str | None:
    return options.get("checkpointlocation")
