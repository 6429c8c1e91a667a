"""The settings of the Elasticsearch family's sinks: every rule and default, once (see
``base/config.py``); each sink's model fixes its ``type`` and adds its engine's own rules."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import (
    AliasChoices,
    Field,
    InstanceOf,
    SecretStr,
    ValidationInfo,
    field_validator,
    model_validator,
)

from exactlyonce.connectors.base.config import Names, SinkConfig, field_error
from exactlyonce.connectors.base.upsert import check_upsert, upsert_defaults
from exactlyonce.connectors.search.schema import CONTROL_INDEX, check_index_name
from exactlyonce.errors import ConfigError
from exactlyonce.retry import RetryPolicy

OpType = Literal["create", "index"]
Mode = Literal["insert", "upsert"]


def _index_name(field: str, value: str) -> str:
    try:
        return check_index_name(field, value)
    except ConfigError as exc:
        raise ValueError(exc.reason) from None


class SearchSinkConfig(SinkConfig):
    """The settings a :class:`~exactlyonce.connectors.search.sink.SearchSink` reads.

    Credentials: ``api_key`` (the encoded key), or ``username`` with ``password``.
    ``mode="upsert"`` writes each document with ``index`` and the epoch as its external
    version (``version_type=external_gte``), so it takes no ``op_type``.
    """

    hosts: Names = Field(min_length=1)
    index: str
    op_type: OpType = "create"
    mode: Mode = "insert"
    # mode="upsert": a boolean stream column; true deletes the document (not stored).
    tombstone_column: str | None = None
    # mode="upsert": the columns whose greatest values win among rows of one key in one epoch.
    order_by: Names = ()
    api_key: SecretStr | None = None
    username: str | None = None
    password: SecretStr | None = None
    ca_certs: str | None = None
    verify_certs: bool = True
    request_timeout: float = Field(default=30.0, gt=0)
    dead_letter_index: str | None = None
    control_index: str = CONTROL_INDEX
    epoch_field: str = Field(default="epoch", min_length=1)
    mapping: dict[str, Any] | None = None
    # Retries of a request to the cluster (every sink's name for it; ``max_retries``, the
    # former name, is still read).
    retries: int = Field(default=5, ge=0, validation_alias=AliasChoices("retries", "max_retries"))
    # Attempts and waits of every request (default: from retries); not in pipeline files.
    retry_policy: InstanceOf[RetryPolicy] | None = Field(default=None, exclude=True)
    bulk_max_actions: int = Field(default=1000, ge=1)
    bulk_max_bytes: int = Field(default=10 * 1024 * 1024, ge=1024)

    @property
    def destination(self) -> str:
        return self.index

    @field_validator("hosts")
    @classmethod
    def _hosts(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        if not all(h.strip() for h in value):
            raise ValueError("one or more cluster URLs are required")
        return value

    @field_validator("index", "dead_letter_index", "control_index")
    @classmethod
    def _index_names(cls, value: str | None, info: ValidationInfo) -> str | None:
        return None if value is None else _index_name(str(info.field_name), value)

    @field_validator("epoch_field")
    @classmethod
    def _epoch_field(cls, value: str) -> str:
        if value.startswith("_"):
            raise ValueError("names starting with '_' are the engine's own")
        return value

    @model_validator(mode="before")
    @classmethod
    def _upsert_defaults(cls, data: Any) -> Any:
        return upsert_defaults(
            data,
            {
                "op_type": "mode 'upsert' indexes each document under its epoch as external "
                "version (version_type=external_gte): leave op_type out"
            },
        )

    @model_validator(mode="after")
    def _upsert(self) -> SearchSinkConfig:
        check_upsert(self.mode, self.tombstone_column, self.id_columns, self.order_by, self.id_from)
        return self

    @model_validator(mode="after")
    def _credentials_and_ids(self) -> SearchSinkConfig:
        if (self.username is None) != (self.password is None):
            raise field_error(
                "password" if self.username else "username", "username and password go together"
            )
        if self.api_key is not None and self.username is not None:
            raise field_error("api_key", "give api_key or basic_auth, not both")
        if self.dead_letter_index is None:
            _index_name("dead_letter_index", self.dead_letter_index_name)
        if len(f"{self.query_name}|{self.head_name}|".encode()) > 480:
            raise field_error("query_name", "query_name and sink name must fit a 512-byte _id")
        return self

    @property
    def dead_letter_index_name(self) -> str:
        return self.dead_letter_index or f"{self.index}-dead-letters"
