"""One frozen, validated config per sink: the only place a setting's rule and default live.

Both doors build the same object: a sink's Python constructor (``PostgresSink(dsn, table,
id_columns, query_name, mode="append")``) and the YAML loader (``exactlyonce.integration.
config``), whose ``sink:`` section is parsed by the very same model. Validation happens when
the object is built; connecting to anything (preflight) is a separate step.

Every secret is a :class:`pydantic.SecretStr`: it never shows in ``repr``, errors or logs;
:meth:`SinkConfig.secrets` (through :func:`exactlyonce.secrets.secret_values`, the one rule)
lists what to scrub from foreign messages.

A problem is a :class:`~exactlyonce.errors.ConfigError` naming the field (``table``; in a
pipeline file ``sink.table``). Messages never echo a value that could be a secret.
"""

from __future__ import annotations

import enum
import os
from collections.abc import Collection, Mapping
from typing import Annotated, Any, Final, Generic, Literal, TypeVar, overload

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Discriminator,
    Field,
    InstanceOf,
    SecretStr,
    Tag,
    ValidationError,
    field_validator,
    model_validator,
)

from exactlyonce.dedup.catalog import DedupConfig
from exactlyonce.dedup.ids import IdFrom as IdFrom  # re-exported for the constructors
from exactlyonce.dedup.ids import RecordIdSpec
from exactlyonce.errors import ConfigError
from exactlyonce.secrets import secret_values

REDIS_URL_ENV = "EXACTLYONCE_REDIS_URL"


def _one_to_list(value: Any) -> Any:
    return [value] if isinstance(value, str) else value


# One name or a list of names (``id_columns: event_id`` or ``[a, b]``), kept as a tuple.
Names = Annotated[tuple[str, ...], BeforeValidator(_one_to_list)]


class Unset(enum.Enum):
    """A constructor argument left out: the config model's default applies."""

    UNSET = "unset"

    def __repr__(self) -> str:
        return "UNSET"


UNSET: Final = Unset.UNSET


V = TypeVar("V")


class Setting(Generic[V]):
    """A sink attribute that reads its config model's field: ``mode = Setting[Mode]()`` makes
    ``sink.mode`` ``sink.config.mode`` (``Setting[str]("dead_letter_index_name")`` names a
    field of another name). A setting then lives in one place, ``sink.config``, frozen: there
    is no copy to drift, and assigning the attribute is an error."""

    def __init__(self, field: str | None = None) -> None:
        self.field = field

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name
        self.field = self.field or name

    @overload
    def __get__(self, sink: None, owner: type) -> Setting[V]: ...
    @overload
    def __get__(self, sink: object, owner: type) -> V: ...
    def __get__(self, sink: object | None, owner: type) -> Setting[V] | V:
        if sink is None:
            return self
        value: V = getattr(sink.config, self.field or self.name)  # type: ignore[attr-defined]
        return value

    def __set__(self, sink: object, value: V) -> None:
        raise AttributeError(
            f"{type(sink).__name__}.{self.name} is the config's {self.field}: settings are "
            "frozen (build a new sink with the new setting)"
        )


def given(
    arguments: Mapping[str, Any], leave_out: Collection[str] = ("self", "check")
) -> dict[str, Any]:
    """A sink constructor's arguments (its ``locals()``) that were passed: a typed,
    discoverable signature whose defaults live in the config model only."""
    return {
        k: v
        for k, v in arguments.items()
        if v is not UNSET and k not in leave_out and not k.startswith("__")
    }


class Settings(BaseModel):
    """Frozen, refuses unknown settings. Built directly (``KafkaBuffer(topic=...)``), a
    problem is a :class:`ConfigError` naming the field; inside a pipeline file, the loader
    names it by its path in the file."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    def __init__(self, **values: Any) -> None:
        try:
            super().__init__(**values)
        except ValidationError as exc:
            raise config_error(exc, data=values) from None

    # Only a direct call goes through __init__: nested in a pipeline file, pydantic validates
    # the section itself and the loader names the field by its path (``sink.buffer.topic``).
    # Without this marker pydantic would call this __init__ for nested sections too
    # (tests/unit/test_sink_configs.py checks both doors).
    __init__.__pydantic_base_init__ = True  # type: ignore[attr-defined]


class DedupSettings(Settings):
    """The Redis catalog's sizing (see :class:`exactlyonce.dedup.catalog.DedupConfig`, whose
    rules it is checked by: one set of rules for Python, pipeline files and options).

    ``retention_epochs`` (default 1000): the horizon after which an ID can no longer be
    recognised by the catalog (it is remembered for at least that many epochs, at most about
    1.25 times that). ``expected_ids`` (default 1,000,000): the distinct IDs the query writes
    in ``retention_epochs`` epochs, over all shards; the Bloom filters are sized for it.
    ``fp_rate`` (default 0.001): the Bloom filters' false-positive rate. ``on_catalog_loss``
    (default ``rebuild``): what an append-only sink does when the catalog lost its IDs.
    Each batch report shows what the catalog holds (``catalog_ids``, ``catalog_bytes``).
    """

    expected_ids: int | None = None
    fp_rate: float | None = None
    retention_epochs: int | None = None
    on_catalog_loss: Literal["rebuild", "fail"] | None = None

    @model_validator(mode="after")
    def _catalog_rules(self) -> DedupSettings:
        try:  # the catalog's own rules, with a stand-in URL (the sink gives the real one)
            DedupConfig(redis_url="redis://rules", **self.model_dump(exclude_none=True))
        except ConfigError as exc:
            raise field_error(exc.field, exc.reason) from None
        return self


def _dedup_kind(value: Any) -> str:
    if isinstance(value, DedupConfig):
        return "<catalog>"
    return "<settings>" if isinstance(value, (Mapping, DedupSettings)) else "<switch>"


# ``dedup``: on/off, the catalog's sizing, or a whole DedupConfig (Python): errors come from
# the one that applies (not a list of every member's). A tag in angle brackets is no part of
# a field's path (:func:`error_path` leaves it out).
Dedup = Annotated[
    Annotated[bool, Tag("<switch>")]
    | Annotated[DedupSettings, Tag("<settings>")]
    | Annotated[InstanceOf[DedupConfig], Tag("<catalog>")],
    Discriminator(_dedup_kind),
]


class SinkConfig(Settings):
    """What every sink takes: the query, record identity, shards and the dedup catalog.

    Record identity: ``id_from="columns"`` (the default) hashes the ``id_columns``;
    ``id_from="content"`` (records without a key: log lines, metrics) hashes the whole row
    with its occurrence number among identical rows of the epoch, and takes no
    ``id_columns`` (see :mod:`exactlyonce.dedup.content` for when that is safe).

    ``type``: the sink's name in the registry (each sink's model fixes it).

    ``allow_unknown_query_id`` (default False): see its description; leave it off.
    """

    type: str
    query_name: str
    id_columns: Names | None = None
    id_from: IdFrom = "columns"
    shards: int | None = Field(default=None, ge=1, le=4096)
    sink_name: str | None = None
    # True: the catalog in redis_url (or $EXACTLYONCE_REDIS_URL); False: off.
    dedup: Dedup = True
    redis_url: SecretStr | None = None
    write_retries: int = Field(default=3, ge=0)
    allow_unknown_query_id: bool = Field(
        default=False,
        description=(
            "Start over a head with committed epochs even when Spark's query id cannot be "
            "established for the run (Spark Connect with several queries in the session and "
            "none named like the sink; a call outside a streaming query). Off by default: "
            "the sink then cannot tell a restart of the same checkpoint from a deleted one, "
            "whose epochs restart at 0 and would be skipped as already committed (silent "
            "loss; DESIGN invariants 9 and 13), so it refuses. Turn it on only where the "
            "checkpoint is never deleted or replaced; an id that differs from the head's is "
            "refused even then."
        ),
    )

    @field_validator("query_name")
    @classmethod
    def _query_name(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("a stable, non-empty name for the streaming query")
        return value

    @field_validator("id_columns")
    @classmethod
    def _distinct(cls, value: tuple[str, ...] | None) -> tuple[str, ...] | None:
        if value is None:
            return value
        if not value:
            raise ValueError("name at least 1 column that identifies a record")
        if any(not c for c in value):
            raise ValueError("column names must be non-empty")
        if len(set(value)) != len(value):
            raise ValueError(f"duplicate column in {list(value)}")
        return value

    @model_validator(mode="after")
    def _record_identity(self) -> SinkConfig:
        if self.id_from == "content" and self.id_columns is not None:
            raise field_error(
                "id_from",
                "with id_from 'content' the ID is a hash of the whole row: leave id_columns "
                "out, or use id_from 'columns'",
            )
        if self.id_from == "columns" and self.id_columns is None:
            raise field_error(
                "id_columns",
                "required: name the column(s) that identify a record, or set id_from "
                "'content' for records without a key",
            )
        return self

    @property
    def destination(self) -> str:
        """What the sink writes, as its default name shows it (``public.events``, a topic,
        an index): each sink's model says."""
        raise NotImplementedError(f"{type(self).__name__} names no destination")

    @property
    def head_name(self) -> str:
        """The sink's name, its head's key with ``query_name``: ``sink_name``, by default
        ``<type>:<destination>``."""
        return self.sink_name or f"{self.type}:{self.destination}"

    def columns_named(self) -> dict[str, tuple[str, ...]]:
        """Setting -> the stream columns it names (a pipeline file checks them against the
        source's schema before the stream starts)."""
        return {"id_columns": tuple(self.id_columns or ())}

    def needs_spark_connectors(self) -> bool:
        """Whether writing needs Spark's Kafka/Avro connector jars on Spark's class path
        (:func:`~exactlyonce.integration.spark.session`'s ``connectors``): no, unless a sink
        says so."""
        return False

    def record_ids(self) -> RecordIdSpec:
        """Where the sink's record IDs come from."""
        if self.id_from == "content":
            return RecordIdSpec.from_content()
        assert self.id_columns is not None  # _record_identity
        return RecordIdSpec.from_columns(list(self.id_columns))

    def _catalog_url(self) -> str | None:
        if self.redis_url is not None:
            return self.redis_url.get_secret_value() or None
        return os.environ.get(REDIS_URL_ENV) or None

    def dedup_config(self) -> DedupConfig | None:
        """The catalog's settings; None when dedup is off. Reads ``$EXACTLYONCE_REDIS_URL``
        when no ``redis_url`` is set."""
        if self.dedup is False:
            return None
        if isinstance(self.dedup, DedupConfig):
            return self.dedup
        url = self._catalog_url()
        if url is None:  # resolved when the sink is built: the environment may set it later
            raise ConfigError(
                "redis_url",
                f"dedup is on by default and needs the catalog's Redis: set redis_url (or "
                f"{REDIS_URL_ENV}), or turn dedup off with dedup=False",
            )
        sizing = {} if self.dedup is True else self.dedup.model_dump(exclude_none=True)
        return DedupConfig(redis_url=url, **sizing)

    def secrets(self) -> list[str]:
        """Values that must never be printed (to scrub foreign error messages)."""
        return secret_values(self)


def field_error(field: str, message: str) -> ValueError:
    """A cross-field error that names its field (``ConfigError.field``) itself."""
    from pydantic_core import PydanticCustomError

    return PydanticCustomError("field_error", message, {"field": field})


def config_error(exc: ValidationError, data: Any = None, skip: tuple[str, ...] = ()) -> ConfigError:
    """A pydantic error as one ConfigError: field paths dotted (``sink.table``), union tags
    left out (``data`` is the input, to tell them apart), never values; ``skip`` drops
    problems at these paths when others remain."""
    problems = [(error_path(e, data), error_message(e)) for e in exc.errors()]
    return problems_error([p for p in problems if p[0] not in skip] or problems)


def problems_error(problems: list[tuple[str, str]]) -> ConfigError:
    """(field, reason) pairs as one ConfigError naming the first field."""
    if len(problems) == 1:
        return ConfigError(*problems[0])
    lines = "\n".join(f"  {field}: {reason}" for field, reason in problems)
    return ConfigError(problems[0][0], f"{len(problems)} problems:\n{lines}")


def error_path(error: Any, data: Any) -> str:
    """The dotted path of a pydantic error, without union tags (``sink.postgres.table`` is
    ``sink.table``). A cross-field check names its field itself, relative to its model."""
    parts: list[Any] = []
    loc = error["loc"]
    current = data
    for i, part in enumerate(loc):
        if isinstance(part, str) and part.startswith("<") and part.endswith(">"):
            continue  # a discriminated union's tag (see Dedup)
        tag = isinstance(current, dict) and part not in current
        if tag and (i < len(loc) - 1 or current.get("type") == part):
            continue  # a union's tag, e.g. 'postgres' in ('sink', 'postgres', 'table')
        parts.append(part)
        current = current.get(part) if isinstance(current, dict) else _item(current, part)
    if error["type"] in ("union_tag_invalid", "union_tag_not_found"):
        parts.append("type")
    field = error.get("ctx", {}).get("field")
    if field is not None:
        prefix = dotted(tuple(parts)) if parts else ""
        return f"{prefix}.{field}" if prefix and not field.startswith(f"{prefix}.") else field
    return dotted(tuple(parts))


def _item(container: Any, index: Any) -> Any:
    if isinstance(container, list) and isinstance(index, int) and 0 <= index < len(container):
        return container[index]
    return None


def error_message(error: Any) -> str:
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


def dotted(path: tuple[Any, ...]) -> str:
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out or "<top level>"
