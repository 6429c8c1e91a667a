"""A pipeline's ``sink:``: each sink's own config model (the one its Python constructor
builds, found in the sink registry by ``type:``), and for the sinks a drainer writes a Kafka
``buffer:`` in front of it, one field shared by them all (:class:`BufferedSink`). A Kafka sink
takes no buffer: it is a Kafka topic already."""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator
from typing import TYPE_CHECKING, Annotated, Any, ClassVar, TypeVar, Union

from pydantic import BaseModel, Field

from exactlyonce.connectors import registry
from exactlyonce.connectors.base.config import SinkConfig
from exactlyonce.connectors.base.kind import SinkKind
from exactlyonce.connectors.kafka.buffer_config import KafkaBuffer
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


@functools.cache
def pipeline_sink_model(kind: SinkKind) -> type[SinkConfig]:
    """A pipeline file's ``sink:`` of ``kind``: the sink's own config model, with
    :class:`BufferedSink`'s ``buffer:`` when a drainer can write the sink."""
    if kind.drain is None:
        return kind.config
    own = kind.config
    doc = f"A pipeline file's {kind.name} ``sink:``: {own.__qualname__}, plus its buffer."
    namespace = {"own_model": own, "__doc__": doc, "__module__": __name__}
    model: type[SinkConfig] = type(own.__name__, (BufferedSink, own), namespace)
    return model


def sink_entry_type(kinds: list[SinkKind]) -> Any:
    """The ``sink:`` field's type: one of the sinks' models, picked by ``type:``."""
    models = tuple(pipeline_sink_model(kind) for kind in kinds)
    return Annotated[Union[models], Field(discriminator="type")]  # noqa: UP007


if TYPE_CHECKING:
    SinkEntry = SinkConfig
else:
    SinkEntry = sink_entry_type(registry.kinds())


ModelT = TypeVar("ModelT", bound=BaseModel)


def own_part(entry: BaseModel, model: type[ModelT]) -> ModelT:
    """The part of a pipeline-file section that is ``model``: ``entry``'s class is a subclass
    of ``model`` that adds settings only the file has (``buffer:``), so every rule of
    ``model`` already ran on these values; they are taken as they are, not validated again.
    The settings the file gave stay marked as given (``op_type`` with ``mode: upsert`` is a
    "was it given?" rule), and the defaults stay the model's."""
    assert isinstance(entry, model), f"{type(entry).__name__} is not a {model.__name__}"
    values = {name: getattr(entry, name) for name in model.model_fields}
    given = entry.model_fields_set & set(model.model_fields)
    return model.model_construct(_fields_set=given, **values)


def build_sink(entry: SinkConfig, *, check: bool = True) -> ExactlyOnceSink:
    """The sink of a pipeline file's ``sink:`` (without its buffer), from the sink's config:
    the same object its Python constructor builds."""
    config = entry.sink_config() if isinstance(entry, BufferedSink) else entry
    with sink_field_errors():
        return registry.kind_of(config).sink_class().from_config(config, check=check)


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
    "KafkaBufferSettings",
    "SinkEntry",
    "build_sink",
    "pipeline_sink_model",
    "sink_entry_type",
    "sink_field_errors",
]
