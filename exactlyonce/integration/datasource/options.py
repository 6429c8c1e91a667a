"""Spark's ``.option(...)`` strings as a sink's config: the SAME model the YAML ``sink:``
section and the sink's Python constructor build, so a rule or a default is written once.

Spark hands a data source its options as strings, with lower-cased names (the config
fields are lower-case already). A field that takes text (``table``, ``dsn``) keeps the
string as given; any other (``shards``, ``create_table``, ``dedup``, a list of
``id_columns``) reads it as JSON when it parses, else as the plain string:
``.option("shards", "4")``, ``.option("dedup", '{"expected_ids": 100000}')``,
``.option("id_columns", "event_id")`` or ``'["a", "b"]'``. A problem is a ConfigError naming
the option; no value is ever echoed (a DSN holds a password).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from pydantic import SecretStr

from exactlyonce.connectors import registry
from exactlyonce.connectors.base.config import SinkConfig
from exactlyonce.errors import ConfigError

SINK_OPTION = "sink"
# Options Spark itself sets or passes through, which are not the sink's.
SPARK_OPTIONS = frozenset({"checkpointlocation", "path", "queryname"})
_TEXT = (str, SecretStr, str | None, SecretStr | None)


def sink_kind(options: Mapping[str, str]) -> str:
    kind = options.get(SINK_OPTION)
    known = sorted(registry.names())
    if kind is None:
        raise ConfigError(SINK_OPTION, f"required: which sink to write, one of {known}")
    if kind not in known:
        raise ConfigError(SINK_OPTION, f"unknown sink {kind!r}; expected one of {known}")
    return kind


def sink_config(options: Mapping[str, str]) -> SinkConfig:
    """The sink's config model built from the data source's options."""
    model = registry.kind_named(sink_kind(options), SINK_OPTION).config
    values: dict[str, Any] = {}
    for name, text in options.items():
        if name == SINK_OPTION or name in SPARK_OPTIONS:
            continue
        field = model.model_fields.get(name)
        text_field = field is not None and field.annotation in _TEXT
        values[name] = text if text_field else _decoded(name, text)
    return model(**values)


def _decoded(name: str, text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        if text.lstrip().startswith(("{", "[")):
            raise ConfigError(name, "not valid JSON (a nested value is given as JSON)") from None
        return text


def checkpoint_location(options: Mapping[str, str]) -> str | None:
    return options.get("checkpointlocation")
