"""The PostgreSQL sink's settings: every rule and default, once (see ``base/config.py``)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, SecretStr, field_validator, model_validator

from exactlyonce.connectors.base.config import Names, SinkConfig, field_error
from exactlyonce.connectors.base.upsert import check_upsert, upsert_defaults

Mode = Literal["insert", "append", "upsert"]
MODES: tuple[Mode, ...] = ("insert", "append", "upsert")


class TableSettings(SinkConfig):
    """A table of records keyed by record ID: ``mode="insert"`` keeps a unique index on
    ``id_column`` (a re-written ID is a no-op); ``"append"`` has none, so exactly-once rests
    on the catalog, which it then requires; ``"upsert"`` keeps the unique index and replaces a
    row when the write's epoch is at least the stored one (no catalog). Shared with
    :class:`exactlyonce.testing.MemorySink`."""

    table: str = Field(min_length=1)
    mode: Mode = "insert"
    id_column: str = Field(default="record_id", min_length=1)
    epoch_column: str = Field(default="epoch", min_length=1)

    @field_validator("table")
    @classmethod
    def _table(cls, value: str) -> str:
        if not value.strip() or "\x00" in value:
            raise ValueError("a table name, optionally schema-qualified, is required")
        return value

    @model_validator(mode="after")
    def _columns_and_mode(self) -> TableSettings:
        if self.epoch_column == self.id_column:
            raise field_error("epoch_column", "must differ from id_column")
        if self.mode == "append" and self.dedup is False:
            raise field_error(
                "dedup",
                "mode 'append' has no unique index: exactly-once needs the catalog (dedup)",
            )
        return self


class PostgresSinkConfig(TableSettings):
    """:class:`~exactlyonce.connectors.postgres.PostgresSink`'s settings: a table (see
    :class:`TableSettings`) on a PostgreSQL server."""

    type: Literal["postgres"] = "postgres"
    dsn: SecretStr
    create_table: bool = True
    connect_timeout: int = Field(default=10, ge=1)
    # mode="upsert": a boolean stream column; true deletes the key (not stored as a column).
    tombstone_column: str | None = None
    # mode="upsert": the columns whose greatest values win among rows of one key in one epoch.
    order_by: Names = ()

    @property
    def destination(self) -> str:
        """The table, schema-qualified (``public`` when the name has no schema)."""
        return self.table if "." in self.table else f"public.{self.table}"

    @model_validator(mode="before")
    @classmethod
    def _upsert_defaults(cls, data: Any) -> Any:
        return upsert_defaults(data)

    @model_validator(mode="after")
    def _upsert(self) -> PostgresSinkConfig:
        check_upsert(self.mode, self.tombstone_column, self.id_columns, self.order_by, self.id_from)
        return self

    @field_validator("dsn")
    @classmethod
    def _dsn(cls, value: SecretStr) -> SecretStr:
        if not value.get_secret_value().strip():
            raise ValueError("a PostgreSQL connection string is required")
        return value
