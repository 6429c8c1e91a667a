"""What the sink's check and rewind (:mod:`.check`, :mod:`.rewind`) use of a
:class:`~exactlyonce.connectors.redis.sink.RedisSink`: its public parts, named here so that
they depend on these and not on the sink's module (no import cycle)."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

if TYPE_CHECKING:
    from exactlyonce.connectors.base.upsert import UpsertSpec
    from exactlyonce.connectors.redis.config import Write
    from exactlyonce.secrets import Secret

T = TypeVar("T")


class RedisParts(Protocol):
    url: Secret
    where: str  # the server, for messages (never a credential)
    write: Write
    prefix: str
    epoch_field: str
    connect_timeout: float

    @property
    def sink_name(self) -> str: ...

    @property
    def upsert(self) -> UpsertSpec | None: ...

    @property
    def head_key(self) -> str: ...

    @property
    def dead_letter_key(self) -> str: ...

    @property
    def stream_registry_key(self) -> str: ...

    @property
    def client(self) -> Any:
        """The sink's connection (opened on first use)."""
        ...

    def reaching(self) -> AbstractContextManager[None]:
        """Connection failures as SinkUnavailableError, never with the password."""
        ...

    def patient(self, call: Callable[[], T]) -> T:
        """``call``, waiting out BUSY."""
        ...
