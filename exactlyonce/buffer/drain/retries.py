"""How the drainer retries: sink and broker failures forever (or until a drain's deadline),
configuration errors never.

The waits are the drainer's since its first version: 0.25 s, doubling up to ``max_backoff_s``.
After each failure, before the wait, the drainer forgets its positions and re-reads them from
the sink (the policy's ``on_retry``), so a commit whose reply was lost is never rewritten.
"""

from __future__ import annotations

import sys

from exactlyonce.errors import CheckpointResetError, ConfigError
from exactlyonce.retry import RetryPolicy

FATAL = (ConfigError, CheckpointResetError)
FIRST_BACKOFF_S = 0.25  # the first wait after a failure; then doubling up to max_backoff_s


def retriable(exc: BaseException) -> bool:
    """Sink and broker failures are retried; a configuration error (FATAL) never is."""
    return isinstance(exc, Exception) and not isinstance(exc, FATAL)


def drain_retry_policy(max_backoff_s: float) -> RetryPolicy:
    """Retry forever (a deadline is added per call), waiting 0.25 s doubling up to
    ``max_backoff_s``."""
    first = min(FIRST_BACKOFF_S, max(0.0, max_backoff_s))
    return RetryPolicy(
        attempts=sys.maxsize,
        initial_s=first,
        max_s=max(first, max_backoff_s),
        transient=retriable,
    )
