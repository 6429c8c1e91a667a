"""What the sink's check and rewind (:mod:`.check`, :mod:`.rewind`) use of a
:class:`~exactlyonce.connectors.postgres.sink.PostgresSink`: its public parts, named here so
that they depend on these and not on the sink's module (no import cycle)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    import psycopg

    from exactlyonce.connectors.base.upsert import UpsertSpec
    from exactlyonce.connectors.postgres.config import Mode
    from exactlyonce.connectors.postgres.schema import TableName


class PostgresParts(Protocol):
    query_name: str
    table: TableName
    mode: Mode
    id_column: str
    epoch_column: str
    create_table: bool
    where: str  # the server, for messages (never a credential)

    @property
    def sink_name(self) -> str: ...

    @property
    def upsert(self) -> UpsertSpec | None: ...

    def connect(self) -> psycopg.Connection[Any]:
        """A new autocommit connection to the sink's database."""
        ...
