"""A pipeline's ``sink:``: each sink's own config model (the one its Python constructor
builds), and for PostgreSQL a Kafka ``buffer:`` in front of it."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import TYPE_CHECKING, Annotated, TypeVar

from pydantic import BaseModel, Field

from exactlyonce.buffer.buffered import KafkaBuffer
from exactlyonce.connectors.elasticsearch.config import ElasticsearchSinkConfig
from exactlyonce.connectors.kafka.config import KafkaSinkConfig
from exactlyonce.connectors.postgres.config import PostgresSinkConfig as PostgresSettings
from exactlyonce.connectors.redis.config import RedisSinkConfig
from exactlyonce.errors import ConfigError

if TYPE_CHECKING:
    from exactlyonce.connectors.base import ExactlyOnceSink
    from exactlyonce.connectors.postgres import PostgresSink


class KafkaBufferSettings(KafkaBuffer):
    """A sink's ``buffer:`` (:class:`exactlyonce.buffer.KafkaBuffer`, the same settings):
    ``run`` writes the stream to this topic, ``exactlyonce drain`` moves it into the sink."""

    batch_size: int | None = Field(default=None, ge=1)  # rows per drain transaction

    def build(self) -> KafkaBuffer:
        """The buffer's own settings (what ``KafkaBuffer(...)`` builds from these values)."""
        return own_part(self, KafkaBuffer)


class PostgresSinkConfig(PostgresSettings):
    """A pipeline file's postgres ``sink:``: the sink's own config
    (:class:`exactlyonce.connectors.postgres.PostgresSinkConfig`), plus its buffer."""

    buffer: KafkaBufferSettings | None = None  # a Kafka buffer ahead of the table

    def sink_config(self) -> PostgresSettings:
        """The sink's config alone (what ``PostgresSink(...)`` builds from the same values)."""
        return own_part(self, PostgresSettings)

    def build(self, *, check: bool = True) -> PostgresSink:
        """The PostgreSQL sink (a drainer's target), without its buffer."""
        from exactlyonce.connectors.postgres import PostgresSink

        with sink_field_errors():
            return PostgresSink.from_config(self.sink_config(), check=check)


ModelT = TypeVar("ModelT", bound=BaseModel)


def own_part(entry: BaseModel, model: type[ModelT]) -> ModelT:
    """The part of a pipeline-file section that is ``model`` (a subclass adds settings
    that only the file has, such as ``buffer:``)."""
    return model.model_validate({name: getattr(entry, name) for name in model.model_fields})


SinkEntry = Annotated[
    PostgresSinkConfig | RedisSinkConfig | ElasticsearchSinkConfig | KafkaSinkConfig,
    Field(discriminator="type"),
]


def build_sink(entry: SinkEntry, *, check: bool = True) -> ExactlyOnceSink:
    """The sink of a pipeline file's ``sink:`` (without its buffer), from the sink's config:
    the same object its Python constructor builds."""
    from exactlyonce.connectors import ElasticsearchSink, KafkaSink, RedisSink

    if isinstance(entry, PostgresSinkConfig):
        return entry.build(check=check)
    sinks: dict[str, type[ExactlyOnceSink]] = {
        "kafka": KafkaSink,
        "redis": RedisSink,
        "elasticsearch": ElasticsearchSink,
    }
    with sink_field_errors():
        return sinks[entry.type].from_config(entry, check=check)


@contextlib.contextmanager
def sink_field_errors() -> Iterator[None]:
    """Re-raise a sink's ConfigError with the field's path in the file: ``sink.table``."""
    try:
        yield
    except ConfigError as exc:
        if exc.field == "query_name" or exc.field.startswith("sink."):
            raise
        raise ConfigError(f"sink.{exc.field}", exc.reason) from None


__all__ = [
    "ElasticsearchSinkConfig",
    "KafkaBufferSettings",
    "KafkaSinkConfig",
    "PostgresSinkConfig",
    "RedisSinkConfig",
    "SinkEntry",
    "build_sink",
    "sink_field_errors",
]
