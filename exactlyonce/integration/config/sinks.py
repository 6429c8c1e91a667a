"""A pipeline's ``sink:``: each sink's own config model (the one its Python constructor
builds), and for the sinks a drainer writes (PostgreSQL, Redis, Elasticsearch) a Kafka
``buffer:`` in front of it, one field shared by the three (:class:`BufferedSink`). A Kafka sink
takes no buffer: it is a Kafka topic already."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import TYPE_CHECKING, Annotated, Any, ClassVar, TypeVar

from pydantic import BaseModel, Field

from exactlyonce.buffer.buffered import KafkaBuffer
from exactlyonce.connectors.base.config import SinkConfig
from exactlyonce.connectors.elasticsearch.config import (
    ElasticsearchSinkConfig as ElasticsearchSettings,
)
from exactlyonce.connectors.kafka.config import KafkaSinkConfig
from exactlyonce.connectors.postgres.config import PostgresSinkConfig as PostgresSettings
from exactlyonce.connectors.redis.config import RedisSinkConfig as RedisSettings
from exactlyonce.errors import ConfigError

if TYPE_CHECKING:
    from exactlyonce.connectors.base import ExactlyOnceSink


class KafkaBufferSettings(KafkaBuffer):
    """A sink's ``buffer:`` (:class:`exactlyonce.buffer.KafkaBuffer`, the same settings):
    ``run`` writes the stream to this topic, ``exactlyonce drain`` moves it into the sink."""

    batch_size: int | None = Field(default=None, ge=1)  # rows per drain transaction

    def build(self) -> KafkaBuffer:
        """The buffer's own settings (what ``KafkaBuffer(...)`` builds from these values)."""
        return own_part(self, KafkaBuffer)


class BufferedSink(BaseModel):
    """The ``buffer:`` of a pipeline file's sink (mixed into the sinks a drainer writes): the
    sink's own config model plus this one field, which the sink itself never sees."""

    buffer: KafkaBufferSettings | None = None  # a Kafka buffer ahead of the sink
    own_model: ClassVar[type[SinkConfig]]

    def sink_config(self) -> Any:
        """The sink's config alone (what its constructor builds from the same values)."""
        return own_part(self, self.own_model)


class PostgresSinkConfig(BufferedSink, PostgresSettings):
    """A pipeline file's postgres ``sink:``: the sink's own config
    (:class:`exactlyonce.connectors.postgres.PostgresSinkConfig`), plus its buffer."""

    own_model = PostgresSettings


class RedisSinkConfig(BufferedSink, RedisSettings):
    """A pipeline file's redis ``sink:``: the sink's own config
    (:class:`exactlyonce.connectors.redis.RedisSinkConfig`), plus its buffer."""

    own_model = RedisSettings


class ElasticsearchSinkConfig(BufferedSink, ElasticsearchSettings):
    """A pipeline file's elasticsearch ``sink:``: the sink's own config
    (:class:`exactlyonce.connectors.elasticsearch.ElasticsearchSinkConfig`), plus its
    buffer."""

    own_model = ElasticsearchSettings


ModelT = TypeVar("ModelT", bound=BaseModel)


def own_part(entry: BaseModel, model: type[ModelT]) -> ModelT:
    """The part of a pipeline-file section that is ``model`` (a subclass adds settings
    that only the file has, such as ``buffer:``). Only the settings the file gave (or a
    validator set): a model's "was it given?" rules (``op_type`` with ``mode: upsert``) see
    what the file said, and the defaults stay the model's."""
    given = entry.model_fields_set
    return model.model_validate(
        {name: getattr(entry, name) for name in model.model_fields if name in given}
    )


SinkEntry = Annotated[
    PostgresSinkConfig | RedisSinkConfig | ElasticsearchSinkConfig | KafkaSinkConfig,
    Field(discriminator="type"),
]


def build_sink(entry: SinkEntry, *, check: bool = True) -> ExactlyOnceSink:
    """The sink of a pipeline file's ``sink:`` (without its buffer), from the sink's config:
    the same object its Python constructor builds."""
    from exactlyonce.connectors import ElasticsearchSink, KafkaSink, PostgresSink, RedisSink

    sinks: dict[str, type[ExactlyOnceSink]] = {
        "postgres": PostgresSink,
        "kafka": KafkaSink,
        "redis": RedisSink,
        "elasticsearch": ElasticsearchSink,
    }
    config = entry.sink_config() if isinstance(entry, BufferedSink) else entry
    with sink_field_errors():
        return sinks[entry.type].from_config(config, check=check)


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
    "BufferedSink",
    "ElasticsearchSinkConfig",
    "KafkaBufferSettings",
    "KafkaSinkConfig",
    "PostgresSinkConfig",
    "RedisSinkConfig",
    "SinkEntry",
    "build_sink",
    "sink_field_errors",
]
