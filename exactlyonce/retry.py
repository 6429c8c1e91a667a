"""One retry policy for everything exactlyonce retries.

A :class:`RetryPolicy` says how many attempts, how long to wait between them (capped
exponential backoff), for how long at most, and which errors are transient. It is a frozen,
picklable value: sinks build it in the driver and Spark ships it to the executor tasks, where
the same object retries a connection, a bulk request or a commit. The waiting itself is
tenacity's (``Retrying`` with ``wait_exponential``, ``stop_after_attempt`` and
``stop_after_delay``), so nothing here re-implements a backoff loop.

Which errors are transient is the caller's knowledge (an HTTP status, a Kafka error code, a
SQLSTATE class), passed as a module-level predicate so the policy stays picklable::

    policy = RetryPolicy(attempts=6, transient=is_transient_http)
    response = policy.call(lambda: client.bulk(...), on_retry=log_it)

Where only part of a request failed (Elasticsearch's per-item 429), the caller loops over
:meth:`RetryPolicy.waits` and retries just the failed part, with the same backoff.

This module is in the bottom layer: it imports nothing of ours.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TypeVar

import tenacity

T = TypeVar("T")

log = logging.getLogger("exactlyonce.retry")


def never(exc: BaseException) -> bool:
    """No error is transient: the policy makes one attempt."""
    return False


def always(exc: BaseException) -> bool:
    """Every error is transient (a caller that already filtered what is fatal)."""
    return True


@dataclass(frozen=True)
class RetryPolicy:
    """How to retry: ``attempts`` tries in all (1 = no retry), waits from ``initial_s``
    doubling up to ``max_s``, giving up after ``deadline_s`` seconds of trying if set.

    ``transient(exc)`` says whether an error may go away; anything else is raised at once.
    """

    attempts: int = 6
    initial_s: float = 0.5
    max_s: float = 30.0
    deadline_s: float | None = None
    transient: Callable[[BaseException], bool] = never

    def __post_init__(self) -> None:
        if self.attempts < 1:
            raise ValueError(f"attempts must be at least 1, got {self.attempts}")
        if self.initial_s < 0 or self.max_s < self.initial_s:
            raise ValueError("need 0 <= initial_s <= max_s")

    @property
    def retries(self) -> int:
        """Attempts after the first."""
        return self.attempts - 1

    def replace(self, **changes: object) -> RetryPolicy:
        """A copy with some fields changed (``policy.replace(attempts=1)``)."""
        return dataclasses.replace(self, **changes)  # type: ignore[arg-type]

    def delay(self, retry: int) -> float:
        """Seconds to wait before retry number ``retry`` (1-based): capped exponential."""
        return float(min(self.max_s, self.initial_s * 2 ** (retry - 1)))

    def waits(self) -> Iterator[float]:
        """The waits before each retry, in order: for callers that retry only what failed."""
        for retry in range(1, self.attempts):
            yield self.delay(retry)

    def retrying(
        self,
        on_retry: Callable[[BaseException, int, float], None] | None = None,
        transient: Callable[[BaseException], bool] | None = None,
    ) -> tenacity.Retrying:
        """tenacity's ``Retrying`` for this policy; the last error is re-raised as it was.

        ``on_retry(error, retry_number, wait_s)`` runs before each wait (to log, or to reset
        state such as a dropped connection); ``transient`` overrides the policy's.
        """
        stop: tenacity.stop.stop_base = tenacity.stop_after_attempt(self.attempts)
        if self.deadline_s is not None:
            stop = stop | tenacity.stop_after_delay(self.deadline_s)

        def before_sleep(state: tenacity.RetryCallState) -> None:
            if on_retry is None or state.outcome is None or state.next_action is None:
                return
            error = state.outcome.exception()
            assert error is not None
            on_retry(error, state.attempt_number, state.next_action.sleep)

        return tenacity.Retrying(
            stop=stop,
            wait=tenacity.wait_exponential(multiplier=self.initial_s, max=self.max_s),
            retry=tenacity.retry_if_exception(transient or self.transient),
            before_sleep=before_sleep,
            reraise=True,
        )

    def call(
        self,
        fn: Callable[[], T],
        on_retry: Callable[[BaseException, int, float], None] | None = None,
        transient: Callable[[BaseException], bool] | None = None,
    ) -> T:
        """``fn()``, retried on transient errors as the policy says; see :meth:`retrying`."""
        return self.retrying(on_retry, transient)(fn)


NO_RETRY = RetryPolicy(attempts=1)
