"""How the sinks of the Elasticsearch family retry: which failures are transient, and the
default policy.

Transient: timeouts, lost connections (TLS failures excepted: those are configuration), and
HTTP 429 and 5xx (:data:`RETRY_STATUSES`), for whole requests and for single bulk items. The
waits and the number of attempts are an :class:`exactlyonce.retry.RetryPolicy`; the sink's
``retries`` builds :func:`default_policy`.

:class:`RetryPolicy` here is the sink's former policy type, kept so existing code that builds
``RetryPolicy(max_retries=..., initial_backoff=..., max_backoff=...)`` keeps working.
"""

from __future__ import annotations

import dataclasses

from exactlyonce import retry
from exactlyonce.connectors.search.engine import EngineError, TlsFailed, Unreachable

RETRY_STATUSES = (429, 500, 502, 503, 504)
INITIAL_BACKOFF_S = 0.5
MAX_BACKOFF_S = 30.0


def retryable_status(status: object) -> bool:
    """Whether a request or a bulk item that got HTTP ``status`` may succeed if re-sent."""
    return status in RETRY_STATUSES


def is_transient(exc: BaseException) -> bool:
    """Whether a request that raised ``exc`` may succeed if re-sent (module-level: picklable)."""
    if isinstance(exc, TlsFailed):
        return False
    if isinstance(exc, EngineError):
        return retryable_status(exc.status_code)
    return isinstance(exc, Unreachable)


def default_policy(max_retries: int) -> retry.RetryPolicy:
    """``max_retries`` retries after the first attempt, waits from 0.5 s doubling up to 30 s."""
    return retry.RetryPolicy(
        attempts=max_retries + 1,
        initial_s=INITIAL_BACKOFF_S,
        max_s=MAX_BACKOFF_S,
        transient=is_transient,
    )


class RetryPolicy(retry.RetryPolicy):
    """The former spelling: ``RetryPolicy(max_retries, initial_backoff, max_backoff)`` is an
    :class:`exactlyonce.retry.RetryPolicy` with ``max_retries + 1`` attempts and these waits."""

    def __init__(
        self,
        max_retries: int = 5,
        initial_backoff: float = INITIAL_BACKOFF_S,
        max_backoff: float = MAX_BACKOFF_S,
    ) -> None:
        super().__init__(
            attempts=max_retries + 1,
            initial_s=initial_backoff,
            max_s=max_backoff,
            transient=is_transient,
        )

    @property
    def max_retries(self) -> int:
        return self.retries

    @property
    def initial_backoff(self) -> float:
        return self.initial_s

    @property
    def max_backoff(self) -> float:
        return self.max_s

    def replace(self, **changes: object) -> retry.RetryPolicy:
        """A plain :class:`exactlyonce.retry.RetryPolicy` with some fields changed."""
        fields = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        return retry.RetryPolicy(**{**fields, **changes})
