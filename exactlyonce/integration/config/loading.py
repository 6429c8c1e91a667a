"""Reading a pipeline file: YAML, ``${VAR}`` substitution, validation, and every problem as
one ConfigError naming the field by its path in the file (``sink.buffer.topic``)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from exactlyonce.connectors.base.config import config_error, dotted, problems_error
from exactlyonce.errors import ConfigError
from exactlyonce.integration.config.pipeline import PipelineConfig, pipeline_model
from exactlyonce.integration.envfile import expand


def load_config(path: str | os.PathLike[str]) -> PipelineConfig:
    """Read, substitute ``${VAR}`` and validate a pipeline file; any problem is a ConfigError."""
    where = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(where, "no such file") from None
    except OSError as exc:
        raise ConfigError(where, f"cannot read: {exc.strerror}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(where, _yaml_reason(exc)) from None
    if not isinstance(data, dict):
        kind = "an empty file" if data is None else type(data).__name__
        raise ConfigError(where, f"the top level must be a mapping of settings, got {kind}")
    return parse_config(data)


def parse_config(
    data: Mapping[str, Any], environ: Mapping[str, str] | None = None
) -> PipelineConfig:
    """Validate an already-parsed mapping (after ``${VAR}`` substitution from ``environ``)."""
    problems: list[tuple[str, str]] = []
    substituted = _substitute(data, os.environ if environ is None else environ, (), problems)
    if problems:
        raise problems_error(problems)
    try:
        return pipeline_model().model_validate(substituted)
    except ValidationError as exc:
        # The sink's query_name comes from the top level, which reports its own problems.
        raise config_error(exc, data=substituted, skip=("sink.query_name",)) from None


def _substitute(
    value: Any, environ: Mapping[str, str], path: tuple[Any, ...], problems: list[tuple[str, str]]
) -> Any:
    if isinstance(value, dict):
        return {k: _substitute(v, environ, (*path, k), problems) for k, v in value.items()}
    if isinstance(value, list):
        return [_substitute(v, environ, (*path, i), problems) for i, v in enumerate(value)]
    if not isinstance(value, str) or "$" not in value:
        return value
    text, missing = expand(value, environ)
    problems.extend(
        (dotted(path), f"environment variable {name} is not set (or use ${{{name}:-default}})")
        for name in missing
    )
    return text


def _yaml_reason(exc: yaml.YAMLError) -> str:
    """Problem and position only: YAML's own message quotes the file's text."""
    if isinstance(exc, yaml.MarkedYAMLError) and exc.problem_mark is not None:
        mark = exc.problem_mark
        return f"invalid YAML at line {mark.line + 1}, column {mark.column + 1}: {exc.problem}"
    return "invalid YAML"
