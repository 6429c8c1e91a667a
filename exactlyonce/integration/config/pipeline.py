"""The pipeline: query name, checkpoint, trigger, source, sink and Spark settings."""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Literal

from pydantic import Field, StrictInt, create_model, field_validator, model_validator
from pydantic_core import PydanticCustomError

from exactlyonce.connectors import registry
from exactlyonce.connectors.base.config import Settings
from exactlyonce.connectors.base.kind import SinkKind
from exactlyonce.dedup.ids import ID_FROM, RecordIdSpec
from exactlyonce.integration.config.common import as_text_mapping
from exactlyonce.integration.config.sinks import (
    BufferedSink,
    SinkEntry,
    build_sink,
    sink_entry_type,
    sink_field_errors,
)
from exactlyonce.integration.config.sources import SourceConfig

if TYPE_CHECKING:
    from exactlyonce.connectors.base import ExactlyOnceSink

_NAME = re.compile(r"[A-Za-z0-9_.-]+")
# What Spark's interval parser takes for a processing-time trigger (no abbreviations).
_INTERVAL = re.compile(
    r"(?i)\s*(interval\s+)?"
    r"(\d+(\.\d+)?\s+(microsecond|millisecond|second|minute|hour|day|week)s?\s*)+"
)


def _id_from_error(message: str) -> PydanticCustomError:
    return PydanticCustomError("id_from", message, {"field": "sink.id_from"})


class TriggerConfig(Settings):
    """Exactly one of ``processing_time`` (``"1 second"``), ``available_now: true`` or
    ``real_time`` (``"5 seconds"``: Spark Real-time Mode, the interval between checkpoints;
    records are written by frontier as they arrive: docs/guides/real-time-mode.md). With
    ``real_time``, ``transport`` is how rows reach the writer: ``arrow`` (the default, each
    row as it arrives) or ``foreach`` (Spark's supported path; rows wait in batches that grow
    to 1 MiB)."""

    processing_time: str | None = None
    available_now: bool | None = None
    real_time: str | None = None
    transport: Literal["arrow", "foreach"] | None = None

    @field_validator("processing_time", "real_time")
    @classmethod
    def _interval(cls, value: str | None) -> str | None:
        if value is not None and not _INTERVAL.fullmatch(value):
            raise ValueError(
                f"{value!r} is not an interval; write e.g. '1 second' or '500 milliseconds'"
            )
        return value

    @model_validator(mode="after")
    def _exactly_one(self) -> TriggerConfig:
        given = [self.processing_time, self.available_now, self.real_time]
        if sum(value is not None for value in given) != 1:
            raise ValueError("give exactly one of processing_time, available_now or real_time")
        if self.available_now is False:
            raise ValueError("available_now must be true when given; omit it otherwise")
        if self.transport is not None and self.real_time is None:
            raise ValueError("transport applies to real_time only; omit it otherwise")
        return self


class SparkConfig(Settings):
    master: str | None = None
    # A Spark Connect server (``sc://host:15002``), or ``local[N]`` for one started in this
    # process: the query runs there, the sink pickled to it as its config.
    remote: str | None = None
    app_name: str | None = None
    conf: dict[str, str] = Field(default_factory=dict)

    @field_validator("conf", mode="before")
    @classmethod
    def _texts(cls, value: Any) -> Any:
        return as_text_mapping(value)

    @model_validator(mode="after")
    def _one_place(self) -> SparkConfig:
        if self.master is not None and self.remote is not None:
            raise PydanticCustomError(
                "spark_remote",
                "give master (classic Spark) or remote (Spark Connect), not both",
                {"field": "spark.remote"},
            )
        return self


class PipelineConfig(Settings):
    query_name: str
    checkpoint: str = Field(min_length=1)
    trigger: TriggerConfig | None = None
    source: SourceConfig
    sink: SinkEntry
    spark: SparkConfig = Field(default_factory=SparkConfig)
    # Serve Prometheus metrics on this port (``exactlyonce run``/``drain``; the command line's
    # --metrics-port wins). See exactlyonce.integration.metrics.
    metrics_port: StrictInt | None = Field(default=None, ge=1, le=65535)
    # Where a NEW checkpoint starts: the source's starting_offsets ("checkpoint", Spark's
    # default), or the sink's source frontiers ("from_sink", Real-time Mode only).
    resume: Literal["checkpoint", "from_sink"] = "checkpoint"

    @field_validator("query_name")
    @classmethod
    def _query_name(cls, value: str) -> str:
        if not _NAME.fullmatch(value):
            raise ValueError("must be non-empty and use only letters, digits, '_', '.' and '-'")
        return value

    @model_validator(mode="after")
    def _columns_in_schema(self) -> PipelineConfig:
        available = self.source.columns()
        for setting, named in self.sink.columns_named().items():
            missing = [c for c in named if c not in available]
            if not missing:
                continue
            if setting == "id_columns":
                message = "column(s) {missing} not in the source schema's columns {available}"
            else:
                message = f"{setting} names column(s) {{missing}} not in the source's columns "
                message += "{available}"
            raise PydanticCustomError(
                f"{setting}_not_in_schema",
                message,
                {"missing": missing, "available": available, "field": f"sink.{setting}"},
            )
        return self

    @model_validator(mode="after")
    def _real_time_mode(self) -> PipelineConfig:
        real_time = self.trigger is not None and self.trigger.real_time is not None
        if real_time and self.source.type != "kafka":
            raise PydanticCustomError(
                "real_time_source",
                "Spark Real-time Mode reads a Kafka source; this pipeline's is {source}",
                {"source": self.source.type, "field": "trigger.real_time"},
            )
        if self.resume == "from_sink" and not real_time:
            raise PydanticCustomError(
                "resume_from_sink",
                "from_sink resumes from the source frontiers a Real-time Mode writer keeps: "
                "set trigger: {{real_time: ...}}",
                {"field": "resume"},
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

    @model_validator(mode="before")
    @classmethod
    def _buffer_only_where_drained(cls, data: Any) -> Any:
        """A buffer goes only in front of a sink a drainer writes (a Kafka sink writes a Kafka
        topic already: a buffer in front of it would be a second topic for nothing)."""
        sink = data.get("sink") if isinstance(data, Mapping) else None
        if not isinstance(sink, Mapping) or "buffer" not in sink:
            return data
        name = sink.get("type")
        if (
            isinstance(name, str)
            and name in registry.names()
            and not registry.kind_named(name).drain
        ):
            drained = [k.name for k in registry.kinds() if k.drain is not None]
            raise PydanticCustomError(
                "buffer_not_drained",
                "a {name} sink takes no buffer (no drainer writes it); a buffer goes in "
                "front of a {drained} sink",
                {"name": name, "drained": ", ".join(drained), "field": "sink.buffer"},
            )
        return data

    @model_validator(mode="before")
    @classmethod
    def _id_from(cls, data: Any) -> Any:
        """``sink.id_from``: where record IDs come from. ``columns`` (the default) and
        ``content`` are the sink's own setting (its config model holds their rules);
        ``source``, a setting of the file only, sets ``id_columns`` to the Kafka source's
        coordinates (topic, partition, offset), so re-reading the same offsets collapses."""
        if not isinstance(data, Mapping) or not isinstance(data.get("sink"), Mapping):
            return data
        sink = dict(data["sink"])
        id_from = sink.get("id_from", "columns")
        if id_from not in (*ID_FROM, "source"):
            raise _id_from_error(
                "must be 'columns' (IDs from id_columns), 'content' (IDs from the whole row, "
                "for records without a key) or 'source' (IDs from Kafka coordinates)"
            )
        if id_from != "source":
            return data
        del sink["id_from"]
        source = data.get("source")
        kind = source.get("type") if isinstance(source, Mapping) else None
        if isinstance(kind, str) and kind != "kafka":
            raise _id_from_error(
                f"'source' makes IDs from Kafka coordinates and needs a source of type "
                f"kafka, not {kind!r}; name the columns with id_columns instead"
            )
        if "id_columns" in sink:
            raise _id_from_error(
                "with id_from 'source' the IDs are (topic, partition, offset): "
                "leave id_columns out, or use id_from 'columns'"
            )
        sink["id_columns"] = list(RecordIdSpec.from_kafka_source().columns)
        return {**data, "sink": sink}

    def build_sink(self, *, check: bool = True) -> ExactlyOnceSink:
        sink = build_sink(self.sink, check=check)
        buffer = getattr(self.sink, "buffer", None)
        if buffer is None:
            return sink
        from exactlyonce.buffer import Buffered

        with sink_field_errors():  # the Spark side writes the buffer topic only
            return Buffered(sink, buffer.build(), check=check)

    def needs_spark_connectors(self) -> bool:
        """Whether the query needs Spark's Kafka/Avro connector jars: Spark's Kafka source,
        or a sink that says so (a buffer is written with confluent-kafka, not Spark). Without
        them a pipeline runs on a pyspark whose connectors Maven does not serve yet."""
        entry = self.sink
        config = entry.sink_config() if isinstance(entry, BufferedSink) else entry
        return self.source.type == "kafka" or bool(config.needs_spark_connectors())

    def trigger_kwargs(self) -> dict[str, Any]:
        """The trigger as :func:`exactlyonce.integration.spark.start_stream` arguments."""
        if self.trigger is None:
            return {}
        if self.trigger.available_now:
            return {"available_now": True}
        if self.trigger.real_time is not None:
            return {
                "real_time": self.trigger.real_time,
                "transport": self.trigger.transport or "arrow",
            }
        return {"processing_time": self.trigger.processing_time}


_BUILT_WITH = tuple(registry.kinds())


@functools.cache
def _with_sinks(kinds: tuple[SinkKind, ...]) -> type[PipelineConfig]:
    model: type[PipelineConfig] = create_model(
        "PipelineConfig", __base__=PipelineConfig, sink=(sink_entry_type(list(kinds)), ...)
    )
    return model


def pipeline_model() -> type[PipelineConfig]:
    """:class:`PipelineConfig`, its ``sink:`` taking every sink registered now (a sink
    registered after this module was imported included)."""
    kinds = tuple(registry.kinds())
    return PipelineConfig if kinds == _BUILT_WITH else _with_sinks(kinds)
