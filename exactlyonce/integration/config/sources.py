"""A pipeline's ``source:``: Spark's replayable streaming sources (files, rate, Kafka)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import Field, field_validator, model_validator

from exactlyonce.connectors.base.config import Settings
from exactlyonce.errors import ConfigError
from exactlyonce.integration.config.common import as_text_mapping, first_line

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession


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


def distinct_ddl_columns(ddl: str) -> list[str]:
    """The DDL's column names; raises ``ValueError`` naming any given twice."""
    names = ddl_column_names(ddl)
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise ValueError(f"duplicate column(s) {duplicates}")
    return names


class _ReaderSettings(Settings):
    """What every source has: ``options`` passed to Spark's reader as given (as text)."""

    options: dict[str, str] = Field(default_factory=dict)

    @field_validator("options", mode="before")
    @classmethod
    def _texts(cls, value: Any) -> Any:
        return as_text_mapping(value)


class FilesSourceConfig(_ReaderSettings):
    """Files in a directory (replayable): Spark's streaming file source."""

    type: Literal["files"]
    format: Literal["json", "csv", "parquet", "orc", "text"] = "json"
    path: str = Field(min_length=1)
    ddl: str = Field(alias="schema", min_length=1)
    max_files_per_trigger: int | None = Field(default=None, ge=1)

    @field_validator("ddl")
    @classmethod
    def _ddl(cls, value: str) -> str:
        distinct_ddl_columns(value)
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
            raise ConfigError("source.schema", first_line(exc)) from None
        if self.max_files_per_trigger is not None:
            reader = reader.option("maxFilesPerTrigger", self.max_files_per_trigger)
        for key, value in self.options.items():
            reader = reader.option(key, value)
        try:
            return reader.load(self.path)
        except PySparkException as exc:
            raise ConfigError("source.path", first_line(exc)) from None


class RateSourceConfig(Settings):
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


# Columns of Spark's Kafka source kept next to the value: the record's coordinates, from
# which ``id_from: source`` makes its ID, and the broker's timestamp.
KAFKA_COORDINATES = ("topic", "partition", "offset", "timestamp")


class KafkaSourceConfig(_ReaderSettings):
    """A Kafka topic (replayable by offset): Spark's own Kafka source (``spark-sql-kafka``).

    ``topic`` (one name or a comma-separated list) or ``subscribe_pattern`` (a regex) says
    what to read. With ``schema`` (Spark DDL) the value is parsed as JSON into those columns;
    without it the columns are ``key`` and ``value`` as text. Either way ``topic``,
    ``partition``, ``offset`` and ``timestamp`` are kept. ``starting_offsets`` applies to the
    query's first start only (later starts resume from the checkpoint): ``earliest`` (the
    default, so nothing produced before the first start is missed), ``latest``, or Spark's
    JSON form. ``options`` are passed to Spark's reader as given (``kafka.*`` keys go to the
    consumer, e.g. ``kafka.security.protocol``).
    """

    type: Literal["kafka"]
    bootstrap_servers: str = Field(min_length=1)
    topic: str | None = Field(default=None, min_length=1)
    subscribe_pattern: str | None = Field(default=None, min_length=1)
    starting_offsets: str = Field(default="earliest", min_length=1)
    max_offsets_per_trigger: int | None = Field(default=None, ge=1)
    fail_on_data_loss: bool = True
    ddl: str | None = Field(default=None, alias="schema", min_length=1)

    @field_validator("ddl")
    @classmethod
    def _ddl(cls, value: str | None) -> str | None:
        if value is None:
            return value
        names = distinct_ddl_columns(value)
        clash = [n for n in names if n in KAFKA_COORDINATES]
        if clash:
            raise ValueError(f"column(s) {clash} clash with the source's own {KAFKA_COORDINATES}")
        return value

    @model_validator(mode="after")
    def _one_subscription(self) -> KafkaSourceConfig:
        if (self.topic is None) == (self.subscribe_pattern is None):
            raise ValueError("give exactly one of topic or subscribe_pattern")
        return self

    def columns(self) -> list[str]:
        values = ddl_column_names(self.ddl) if self.ddl else ["key", "value"]
        return [*values, *KAFKA_COORDINATES]

    def reader_options(self) -> dict[str, str]:
        """Spark's Kafka source options for this config."""
        options = {
            "kafka.bootstrap.servers": self.bootstrap_servers,
            "startingOffsets": self.starting_offsets,
            "failOnDataLoss": str(self.fail_on_data_loss).lower(),
        }
        if self.topic is not None:
            options["subscribe"] = self.topic
        else:
            options["subscribePattern"] = str(self.subscribe_pattern)
        if self.max_offsets_per_trigger is not None:
            options["maxOffsetsPerTrigger"] = str(self.max_offsets_per_trigger)
        return {**options, **self.options}

    def build(self, spark: SparkSession) -> DataFrame:
        """The streaming DataFrame; a DDL Spark cannot parse is a ConfigError."""
        from pyspark.errors import PySparkException
        from pyspark.sql import functions as F

        reader = spark.readStream.format("kafka")
        for key, value in self.reader_options().items():
            reader = reader.option(key, value)
        try:
            raw = reader.load()
        except PySparkException as exc:
            raise ConfigError("source", first_line(exc)) from None
        coordinates = [F.col(c) for c in KAFKA_COORDINATES]
        if self.ddl is None:
            text = [F.col(c).cast("string").alias(c) for c in ("key", "value")]
            return raw.select(*text, *coordinates)
        try:
            parsed = F.from_json(F.col("value").cast("string"), self.ddl)
            return raw.select(parsed.alias("_value"), *coordinates).select("_value.*", *coordinates)
        except PySparkException as exc:
            raise ConfigError("source.schema", first_line(exc)) from None


SourceConfig = Annotated[
    FilesSourceConfig | RateSourceConfig | KafkaSourceConfig, Field(discriminator="type")
]
