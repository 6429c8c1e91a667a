"""The Redis sink's settings: every rule and default, once (see ``base/config.py``)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, SecretStr, StrictInt, field_validator, model_validator
from redis.connection import parse_url

from exactlyonce.connectors.base.config import Names, SinkConfig, field_error
from exactlyonce.connectors.base.upsert import check_upsert, upsert_defaults
from exactlyonce.connectors.redis.template import KeyTemplate
from exactlyonce.dedup.keys import NAMESPACE_ROOT, namespace
from exactlyonce.errors import ConfigError
from exactlyonce.secrets import dsn_password, scrub

Write = Literal["hash", "string", "stream"]
WRITES: tuple[Write, ...] = ("hash", "string", "stream")
Mode = Literal["insert", "upsert"]


class RedisSinkConfig(SinkConfig):
    """:class:`~exactlyonce.connectors.redis.RedisSink`'s settings.

    ``write="stream"`` appends (a second write of an ID is a second entry), so it requires
    the catalog; hash and string writes are idempotent by key. ``mode="upsert"`` (hash and
    string writes) replaces a key's value when the write's epoch is at least the stored one;
    its ``key_template`` names exactly the ``id_columns``, so one key is one record.

    Control keys (DESIGN invariant 14): the sink keeps its head, shard markers, staging, dead
    letters, drain offsets and upsert companions under ``<prefix>:`` (``prefix``, by default
    ``eo:{<query>:<digest>}:sink``), and every dedup catalog lives under ``eo:{``. A
    ``key_template`` whose every key falls there is refused; a key that a record's values
    render there is refused at write time (a dead letter with why), never written.
    """

    type: Literal["redis"] = "redis"
    url: SecretStr
    key_template: str = Field(min_length=1)
    write: Write = "hash"
    mode: Mode = "insert"
    # mode="upsert": a boolean stream column; true deletes the key (not stored).
    tombstone_column: str | None = None
    # mode="upsert": the columns whose greatest values win among rows of one key in one epoch.
    order_by: Names = ()
    ttl_seconds: float | None = Field(default=None, ge=0.001)
    pipeline_size: StrictInt = Field(default=10_000, ge=1)
    prefix: str | None = None
    id_field: str = Field(default="record_id", min_length=1)
    epoch_field: str = Field(default="epoch", min_length=1)
    socket_timeout: float = Field(default=120.0, gt=0)
    connect_timeout: float = Field(default=10.0, gt=0)
    retries: int = Field(default=30, ge=0)

    @property
    def destination(self) -> str:
        """The write mode and the key template: ``hash:ev:{event_id}``."""
        return f"{self.write}:{self.template.text}"

    @field_validator("url")
    @classmethod
    def _url(cls, value: SecretStr) -> SecretStr:
        url = value.get_secret_value()
        if not url.startswith(("redis://", "rediss://", "unix://")):
            raise ValueError("must be a redis://, rediss:// or unix:// URL")
        try:
            parse_url(url)  # type: ignore[no-untyped-call]
        except ValueError as exc:
            reason = scrub(str(exc), dsn_password(url))
            raise ValueError(f"not a valid Redis URL: {reason}") from None
        return value

    @field_validator("key_template")
    @classmethod
    def _template(cls, value: str) -> str:
        try:
            KeyTemplate.parse(value)
        except ConfigError as exc:
            raise ValueError(exc.reason) from None
        return value

    @property
    def template(self) -> KeyTemplate:
        return KeyTemplate.parse(self.key_template)

    @property
    def key_prefix(self) -> str:
        """Where the sink's own keys live: ``prefix``, by default ``<namespace>:sink`` of
        (query, sink name)."""
        return self.prefix or f"{namespace(self.query_name, self.head_name)}:sink"

    @property
    def control_namespaces(self) -> tuple[str, ...]:
        """Key prefixes no record may be written under: the sink's own keys, and every
        catalog's (``eo:{``)."""
        return (f"{self.key_prefix}:", NAMESPACE_ROOT)

    @property
    def guarded_namespaces(self) -> tuple[str, ...]:
        """The control namespaces some rendered key may fall into: each record's key is
        checked against these at write time (none: the template cannot reach any)."""
        return tuple(n for n in self.control_namespaces if self.template.may_reach(n))

    def columns_named(self) -> dict[str, tuple[str, ...]]:
        return {**super().columns_named(), "key_template": tuple(self.template.fields)}

    @model_validator(mode="before")
    @classmethod
    def _upsert_defaults(cls, data: Any) -> Any:
        return upsert_defaults(data)

    @model_validator(mode="after")
    def _upsert(self) -> RedisSinkConfig:
        check_upsert(self.mode, self.tombstone_column, self.id_columns, self.order_by, self.id_from)
        if self.mode != "upsert":
            return self
        if self.write == "stream":
            raise field_error(
                "write", "mode 'upsert' replaces a key's value: write 'hash' or 'string'"
            )
        if set(self.template.fields) != set(self.id_columns or ()):
            raise field_error(
                "key_template",
                f"in mode 'upsert' it names exactly the id_columns {list(self.id_columns or ())} "
                f"(one key per record, guarded by its epoch), not {list(self.template.fields)}",
            )
        return self

    @model_validator(mode="after")
    def _keys_apart_from_control(self) -> RedisSinkConfig:
        for name in self.control_namespaces:
            if self.template.always_in(name):
                raise field_error(
                    "key_template",
                    f"every key it renders begins with {self.template.fixed_start!r}, inside "
                    f"the control namespace {name!r} (the sink's head, shard markers, offsets "
                    "and catalog live there): records would overwrite them; choose another "
                    "key_template (or prefix)",
                )
        return self

    @model_validator(mode="after")
    def _fields_and_write(self) -> RedisSinkConfig:
        if self.epoch_field == self.id_field:
            raise field_error("epoch_field", "must differ from id_field")
        if self.write == "stream" and self.dedup is False:
            raise field_error(
                "dedup", "write='stream' appends: duplicates in the input need the catalog"
            )
        if self.write != "stream" and not self.template.fields:
            raise field_error(
                "key_template",
                f"{self.key_template!r} names no column: every record would overwrite one key",
            )
        return self
