"""What the pipeline-file models share: YAML scalars as the strings Spark options take.
(Their base is the sinks' own, :class:`exactlyonce.connectors.base.config.Settings`.)"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def as_text_mapping(value: Any) -> Any:
    """YAML scalars to the strings Spark options take (``true``, not ``True``)."""
    if not isinstance(value, Mapping):
        return value
    return {k: as_text(v) for k, v in value.items()}


def as_text(value: Any) -> Any:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return str(value)
    return value


def first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
