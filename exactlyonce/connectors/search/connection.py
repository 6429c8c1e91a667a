"""Reaching the cluster: :class:`SearchConnection` (picklable, prints no credential, names its
engine) and :func:`call`, one request retried as the sink's policy says, its failures as our
errors."""

from __future__ import annotations

import base64
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from exactlyonce.connectors.search.engine import (
    Client,
    Conflict,
    CredentialsRefused,
    Engine,
    EngineError,
    NotFound,
    TlsFailed,
    Unreachable,
)
from exactlyonce.connectors.search.policy import is_transient, retryable_status
from exactlyonce.errors import ConfigError, SinkUnavailableError
from exactlyonce.retry import RetryPolicy
from exactlyonce.secrets import Secret, dsn_password, redact_dsn, scrub

T = TypeVar("T")


@dataclass(frozen=True)
class SearchConnection:
    """How to reach the cluster, and with which client (``engine``); picklable, prints no
    credential."""

    engine: Engine
    hosts: tuple[str, ...]
    api_key: Secret | None = None
    user: str | None = None
    password: Secret | None = None
    ca_certs: str | None = None
    verify_certs: bool = True
    request_timeout: float = 30.0

    @property
    def where(self) -> str:
        return ", ".join(redact_dsn(h) for h in self.hosts)

    def secrets(self) -> list[str]:
        found = [dsn_password(h) for h in self.hosts]
        if self.api_key is not None:
            key = self.api_key.reveal()
            found += [key, *_api_key_parts(key)]
        if self.password is not None:
            pw = self.password.reveal()
            found += [pw, base64.b64encode(f"{self.user}:{pw}".encode()).decode()]
        return [s for s in found if s]

    @property
    def name(self) -> str:
        """The engine's name: ``Elasticsearch``, ``OpenSearch``."""
        return self.engine.name

    def client(self) -> Client:
        return self.engine.connect(self)


def _api_key_parts(key: str) -> list[str]:
    try:
        decoded = base64.b64decode(key, validate=True).decode()
    except ValueError:
        return []
    return [decoded.partition(":")[2]] if ":" in decoded else []


def call(
    conn: SearchConnection,
    client: Client,
    policy: RetryPolicy,
    what: str,
    fn: Callable[[Client], T],
    answers: tuple[type[EngineError], ...] = (NotFound, Conflict),
) -> T:
    """One request with retries on timeouts, lost connections, 429 and 5xx.

    ``answers`` (404 and 409 by default) reach the caller unchanged; credentials refused
    become a ConfigError, anything still failing a SinkUnavailableError. Messages never hold
    secrets. ``policy`` gives the attempts and waits; what is transient is
    :func:`~exactlyonce.connectors.search.policy.is_transient`.
    """

    def transient(exc: BaseException) -> bool:
        return not isinstance(exc, answers) and is_transient(exc)

    try:
        return policy.call(lambda: fn(client), transient=transient)
    except answers:
        raise
    except CredentialsRefused as exc:
        field = "api_key" if conn.api_key else "basic_auth"
        reason = scrub(exc.message, *conn.secrets())
        raise ConfigError(
            field,
            f"{conn.name} at {conn.where} refused the credentials for {what} "
            f"(HTTP {exc.status_code}: {reason})",
        ) from None
    except TlsFailed as exc:
        raise ConfigError(
            "ca_certs",
            f"TLS with {conn.name} at {conn.where} failed for {what}: "
            f"{scrub(str(exc), *conn.secrets())}",
        ) from None
    except EngineError as exc:
        if not retryable_status(exc.status_code):
            raise SinkUnavailableError(
                f"{conn.name} at {conn.where} refused {what}: HTTP {exc.status_code} "
                f"{scrub(exc.message, *conn.secrets())}"
            ) from None
        error = f"HTTP {exc.status_code}"
    except Unreachable as exc:
        error = scrub(str(exc), *conn.secrets())
    raise SinkUnavailableError(
        f"cannot reach {conn.name} at {conn.where} for {what} after "
        f"{policy.retries} retries: {error}"
    )
