"""Pipeline config files: typed, validated, frozen.

A pipeline file (YAML) names a streaming query, its checkpoint, trigger, source and sink::

    query_name: clicks-to-pg
    checkpoint: .exactlyonce/demo/checkpoint
    trigger: {processing_time: "1 second"}        # or {available_now: true}
    source:
      type: files
      format: json
      path: .exactlyonce/demo/input
      schema: "event_id STRING, user_id BIGINT, action STRING, ts TIMESTAMP"
      max_files_per_trigger: 1
    sink:
      type: postgres
      dsn: ${EXACTLYONCE_PG_DSN}
      table: demo_events
      id_columns: [event_id]

``${VAR}`` and ``${VAR:-default}`` in any string value are replaced from the environment, so
credentials never live in the file; ``$${`` stands for a literal ``${``. Relative paths are
relative to the working directory. Every error, whatever its cause (missing file, YAML syntax,
a missing variable, a bad field), is a :class:`~exactlyonce.errors.ConfigError`
naming the field by its dotted path (``sink.id_columns``). No message and no ``repr`` ever
shows a DSN: DSNs are :class:`pydantic.SecretStr`, and messages never echo input values.
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from exactlyonce.buffer.buffered import KafkaBuffer
from exactlyonce.connectors.elasticsearch.config import ElasticsearchSinkConfig
from exactlyonce.connectors.kafka.config import KafkaSinkConfig
from exactlyonce.connectors.postgres.config import PostgresSinkConfig as PostgresSettings
from exactlyonce.connectors.redis.config import RedisSinkConfig
from exactlyonce.errors import ConfigError

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from exactlyonce.connectors.base import ExactlyOnceSink
    from exactlyonce.connectors.postgres import PostgresSink

_NAME = re.compile(r"[A-Za-z0-9_.-]+")
_VAR = re.compile(r"\$\$\{|\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")
# What Spark's interval parser takes for a processing-time trigger (no abbreviations).
_INTERVAL = re.compile(
    r"(?i)\s*(interval\s+)?"
    r"(\d+(\.\d+)?\s+(microsecond|millisecond|second|minute|hour|day|week)s?\s*)+"
)


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


# ---------------------------------------------------------------------- trigger, spark


class TriggerConfig(_Model):
    """Exactly one of ``processing_time`` (``"1 second"``) or ``available_now: true``."""

    processing_time: str | None = None
    available_now: bool | None = None

    @field_validator("processing_time")
    @classmethod
    def _interval(cls, value: str | None) -> str | None:
        if value is not None and not _INTERVAL.fullmatch(value):
            raise ValueError(
                f"{value!r} is not an interval; write e.g. '1 second' or '500 milliseconds'"
            )
        return value

    @model_validator(mode="after")
    def _exactly_one(self) -> TriggerConfig:
        if (self.processing_time is None) == (self.available_now is None):
            raise ValueError("give exactly one of processing_time or available_now")
        if self.available_now is False:
            raise ValueError("available_now must be true when given; omit it otherwise")
        return self


class SparkConfig(_Model):
    master: str | None = None
    app_name: str | None = None
    conf: dict[str, str] = Field(default_factory=dict)

    @field_validator("conf", mode="before")
    @classmethod
    def _texts(cls, value: Any) -> Any:
        return _as_text_mapping(value)


def _as_text_mapping(value: Any) -> Any:
    """YAML scalars to the strings Spark options take (``true``, not ``True``)."""
    if not isinstance(value, Mapping):
        return value
    return {k: _as_text(v) for k, v in value.items()}


def _as_text(value: Any) -> Any:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return str(value)
    return value


# ---------------------------------------------------------------------- sources


def ddl_column_names(ddl: str) -> list[str]:
    """Top-level column names of a Spark DDL string (``"a INT, b STRUCT<x: INT>"``).

    A cheap syntactic parse: split on commas outside ``<>``/``()``/quotes, take the first
    token (backticks removed). Spark parses the full DDL when the source is built.
    """
    names = []
    for part in _split_top_level(ddl):
        part = part.strip()
        if not part:
            raise ValueError("empty column definition (a stray comma?)")
        if part.startswith("`"):
            end = part.find("`", 1)
            while end != -1 and part[end + 1 : end + 2] == "`":
                end = part.find("`", end + 2)
            if end == -1:
                raise ValueError(f"unclosed backtick in {part!r}")
            name, rest = part[1:end].replace("``", "`"), part[end + 1 :]
        else:
            match = re.match(r"[^\s:]+", part)
            assert match is not None
            name, rest = match.group(0), part[match.end() :]
        if not rest.strip().lstrip(":").strip():
            raise ValueError(f"column {name!r} has no type")
        names.append(name)
    if not names:
        raise ValueError("the schema names no columns")
    return names


def _split_top_level(text: str) -> Iterator[str]:
    depth, quote, start = 0, "", 0
    for i, ch in enumerate(text):
        if quote:
            if ch == quote:
                quote = ""
        elif ch in "`'\"":
            quote = ch
        elif ch in "<(":
            depth += 1
        elif ch in ">)":
            depth -= 1
        elif ch == "," and depth == 0:
            yield text[start:i]
            start = i + 1
    yield text[start:]


class FilesSourceConfig(_Model):
    """Files in a directory (replayable): Spark's streaming file source."""

    type: Literal["files"]
    format: Literal["json", "csv", "parquet", "orc", "text"] = "json"
    path: str = Field(min_length=1)
    ddl: str = Field(alias="schema", min_length=1)
    max_files_per_trigger: int | None = Field(default=None, ge=1)
    options: dict[str, str] = Field(default_factory=dict)

    @field_validator("options", mode="before")
    @classmethod
    def _texts(cls, value: Any) -> Any:
        return _as_text_mapping(value)

    @field_validator("ddl")
    @classmethod
    def _ddl(cls, value: str) -> str:
        names = ddl_column_names(value)
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise ValueError(f"duplicate column(s) {duplicates}")
        return value

    def columns(self) -> list[str]:
        return ddl_column_names(self.ddl)

    def build(self, spark: SparkSession) -> DataFrame:
        """The streaming DataFrame; a DDL Spark cannot parse is a ConfigError."""
        from pyspark.errors import PySparkException

        reader = spark.readStream.format(self.format)
        try:
            reader = reader.schema(self.ddl)
        except PySparkException as exc:
            raise ConfigError("source.schema", _first_line(exc)) from None
        if self.max_files_per_trigger is not None:
            reader = reader.option("maxFilesPerTrigger", self.max_files_per_trigger)
        for key, value in self.options.items():
            reader = reader.option(key, value)
        try:
            return reader.load(self.path)
        except PySparkException as exc:
            raise ConfigError("source.path", _first_line(exc)) from None


class RateSourceConfig(_Model):
    """Spark's rate source (``timestamp``, ``value``): replayable test data."""

    type: Literal["rate"]
    rows_per_second: int = Field(default=10, ge=1)
    num_partitions: int | None = Field(default=None, ge=1)

    def columns(self) -> list[str]:
        return ["timestamp", "value"]

    def build(self, spark: SparkSession) -> DataFrame:
        reader = spark.readStream.format("rate").option("rowsPerSecond", self.rows_per_second)
        if self.num_partitions is not None:
            reader = reader.option("numPartitions", self.num_partitions)
        return reader.load()


SourceConfig = Annotated[FilesSourceConfig | RateSourceConfig, Field(discriminator="type")]


# ---------------------------------------------------------------------- sinks


class KafkaBufferSettings(KafkaBuffer):
    """A sink's ``buffer:`` (:class:`exactlyonce.buffer.KafkaBuffer`, the same settings):
    ``run`` writes the stream to this topic, ``exactlyonce drain`` moves it into the sink."""

    batch_size: int | None = Field(default=None, ge=1)  # rows per drain transaction

    def build(self) -> KafkaBuffer:
        """The buffer's own settings (what ``KafkaBuffer(...)`` builds from these values)."""
        fields = {name: getattr(self, name) for name in KafkaBuffer.model_fields}
        return KafkaBuffer.model_validate(fields)


class PostgresSinkConfig(PostgresSettings):
    """A pipeline file's postgres ``sink:``: the sink's own config
    (:class:`exactlyonce.connectors.postgres.PostgresSinkConfig`), plus its buffer."""

    buffer: KafkaBufferSettings | None = None  # a Kafka buffer ahead of the table

    def sink_config(self) -> PostgresSettings:
        """The sink's config alone (what ``PostgresSink(...)`` builds from the same values)."""
        fields = {name: getattr(self, name) for name in PostgresSettings.model_fields}
        return PostgresSettings.model_validate(fields)

    def build(self, *, check: bool = True) -> PostgresSink:
        from exactlyonce.connectors.postgres import PostgresSink

        with sink_field_errors():
            return PostgresSink.from_config(self.sink_config(), check=check)


SinkEntry = Annotated[
    PostgresSinkConfig | RedisSinkConfig | ElasticsearchSinkConfig | KafkaSinkConfig,
    Field(discriminator="type"),
]


def build_sink(entry: SinkEntry, *, check: bool = True) -> ExactlyOnceSink:
    """The sink of a pipeline file's ``sink:`` (without its buffer), from the sink's config:
    the same object its Python constructor builds."""
    from exactlyonce.connectors import ElasticsearchSink, KafkaSink, PostgresSink, RedisSink

    with sink_field_errors():
        if isinstance(entry, PostgresSinkConfig):
            return PostgresSink.from_config(entry.sink_config(), check=check)
        if isinstance(entry, KafkaSinkConfig):
            return KafkaSink.from_config(entry, check=check)
        if isinstance(entry, RedisSinkConfig):
            return RedisSink.from_config(entry, check=check)
        return ElasticsearchSink.from_config(entry, check=check)


@contextlib.contextmanager
def sink_field_errors() -> Iterator[None]:
    """Re-raise a sink's ConfigError with the field's path in the file: ``sink.table``."""
    try:
        yield
    except ConfigError as exc:
        if exc.field == "query_name" or exc.field.startswith("sink."):
            raise
        raise ConfigError(f"sink.{exc.field}", exc.reason) from None


# ---------------------------------------------------------------------- the pipeline


class PipelineConfig(_Model):
    query_name: str
    checkpoint: str = Field(min_length=1)
    trigger: TriggerConfig | None = None
    source: SourceConfig
    sink: SinkEntry
    spark: SparkConfig = Field(default_factory=SparkConfig)

    @field_validator("query_name")
    @classmethod
    def _query_name(cls, value: str) -> str:
        if not _NAME.fullmatch(value):
            raise ValueError("must be non-empty and use only letters, digits, '_', '.' and '-'")
        return value

    @model_validator(mode="after")
    def _id_columns_in_schema(self) -> PipelineConfig:
        available = self.source.columns()
        missing = [c for c in self.sink.id_columns if c not in available]
        if missing:
            raise PydanticCustomError(
                "id_columns_not_in_schema",
                "column(s) {missing} not in the source schema's columns {available}",
                {"missing": missing, "available": available, "field": "sink.id_columns"},
            )
        if isinstance(self.sink, RedisSinkConfig):
            from exactlyonce.connectors.redis import KeyTemplate

            with sink_field_errors():
                fields = KeyTemplate.parse(self.sink.key_template).fields
            missing = [c for c in fields if c not in available]
            if missing:
                raise PydanticCustomError(
                    "template_columns_not_in_schema",
                    "key_template names column(s) {missing} not in the source's columns "
                    "{available}",
                    {"missing": missing, "available": available, "field": "sink.key_template"},
                )
        return self

    @model_validator(mode="before")
    @classmethod
    def _query_name_to_sink(cls, data: Any) -> Any:
        """The sink's config carries the query's name, set once at the top of the file."""
        if isinstance(data, Mapping) and isinstance(data.get("sink"), Mapping):
            if "query_name" in data["sink"]:
                raise PydanticCustomError(
                    "query_name_in_sink",
                    "set query_name at the top level of the file, not in sink",
                    {"field": "sink.query_name"},
                )
            if "query_name" in data:
                data = {**data, "sink": {**data["sink"], "query_name": data["query_name"]}}
        return data

    def build_sink(self, *, check: bool = True) -> ExactlyOnceSink:
        sink = build_sink(self.sink, check=check)
        buffer = getattr(self.sink, "buffer", None)
        if buffer is None:
            return sink
        from exactlyonce.buffer import Buffered

        with sink_field_errors():  # the Spark side writes the buffer topic only
            return Buffered(sink, buffer.build(), check=check)  # type: ignore[arg-type]

    def trigger_kwargs(self) -> dict[str, Any]:
        """The trigger as :func:`exactlyonce.integration.spark.start_stream` arguments."""
        if self.trigger is None:
            return {}
        if self.trigger.available_now:
            return {"available_now": True}
        return {"processing_time": self.trigger.processing_time}


# ---------------------------------------------------------------------- loading


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
        raise _config_error(problems)
    try:
        return PipelineConfig.model_validate(substituted)
    except ValidationError as exc:
        problems = [(_error_path(e, substituted), _error_message(e)) for e in exc.errors()]
        # The sink's query_name comes from the top level, which reports its own problems.
        problems = [p for p in problems if p[0] != "sink.query_name"] or problems
        raise _config_error(problems) from None


def _substitute(
    value: Any, environ: Mapping[str, str], path: tuple[Any, ...], problems: list[tuple[str, str]]
) -> Any:
    if isinstance(value, dict):
        return {k: _substitute(v, environ, (*path, k), problems) for k, v in value.items()}
    if isinstance(value, list):
        return [_substitute(v, environ, (*path, i), problems) for i, v in enumerate(value)]
    if not isinstance(value, str) or "$" not in value:
        return value

    def replace(match: re.Match[str]) -> str:
        if match.group(0) == "$${":
            return "${"
        name, default = match.group(1), match.group(2)
        found = environ.get(name)
        if found is not None and (found or default is None):
            return found
        if default is not None:
            return default
        problems.append(
            (_dotted(path), f"environment variable {name} is not set (or use ${{{name}:-default}})")
        )
        return ""

    return _VAR.sub(replace, value)


def _config_error(problems: Sequence[tuple[str, str]]) -> ConfigError:
    if len(problems) == 1:
        return ConfigError(*problems[0])
    lines = "\n".join(f"  {field}: {reason}" for field, reason in problems)
    return ConfigError(problems[0][0], f"{len(problems)} problems:\n{lines}")


def _error_path(error: Any, data: Any) -> str:
    """The dotted path of a pydantic error, without union tags (``sink.postgres.table``).

    A cross-field check names its field itself, relative to the model that raised it."""
    parts: list[Any] = []
    loc = error["loc"]
    current = data
    for i, part in enumerate(loc):
        tag = isinstance(current, dict) and part not in current
        if tag and (i < len(loc) - 1 or current.get("type") == part):
            continue  # the discriminator's tag, e.g. 'postgres' in ('sink', 'postgres', ...)
        parts.append(part)
        current = current.get(part) if isinstance(current, dict) else _item(current, part)
    if error["type"] in ("union_tag_invalid", "union_tag_not_found"):
        parts.append("type")
    field = error.get("ctx", {}).get("field")
    if field is not None:
        prefix = _dotted(tuple(parts)) if parts else ""
        return f"{prefix}.{field}" if prefix and not field.startswith(f"{prefix}.") else field
    return _dotted(tuple(parts))


def _item(container: Any, index: Any) -> Any:
    if isinstance(container, list) and isinstance(index, int) and 0 <= index < len(container):
        return container[index]
    return None


def _error_message(error: Any) -> str:
    """Pydantic's message, never the input value (it may be a secret)."""
    ctx = error.get("ctx", {})
    if error["type"] == "union_tag_invalid":
        return f"unknown type {ctx['tag']!r}; expected one of {ctx['expected_tags']}"
    if error["type"] == "union_tag_not_found":
        return "required: the kind of source or sink"
    if error["type"] == "extra_forbidden":
        return "unknown setting (not allowed here)"
    message = str(error["msg"]).replace("Tuple should", "List should")
    return message.removeprefix("Value error, ")


def _dotted(path: tuple[Any, ...]) -> str:
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out or "<top level>"


def _yaml_reason(exc: yaml.YAMLError) -> str:
    """Problem and position only: YAML's own message quotes the file's text."""
    if isinstance(exc, yaml.MarkedYAMLError) and exc.problem_mark is not None:
        mark = exc.problem_mark
        return f"invalid YAML at line {mark.line + 1}, column {mark.column + 1}: {exc.problem}"
    return "invalid YAML"


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
