"""Talking to the sink's Redis: clients, waiting out BUSY, and errors by meaning.

- :func:`connect`: a client whose connection errors redis-py itself retries with backoff;
- :func:`patient`: a call retried while Redis answers BUSY (another query's apply script
  runs), as :data:`BUSY_POLICY` says;
- :func:`reaching`: connection failures as :class:`SinkUnavailableError` (never with the
  password), script errors (``EO_HEAD_LOST``, ``EO_STAGING_LOST``...) as
  :class:`ExactlyOnceError` via :func:`script_error`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import redis

from exactlyonce.errors import ConfigError, ExactlyOnceError, SinkUnavailableError
from exactlyonce.retry import RetryPolicy
from exactlyonce.secrets import Secret, dsn_password, scrub

T = TypeVar("T")

BUSY_WAIT_S = 600.0


def is_busy(exc: BaseException) -> bool:
    """Redis answered BUSY: a script runs, and the command was not run (safe to re-send)."""
    return isinstance(exc, redis.ResponseError) and str(exc).startswith("BUSY")


BUSY_POLICY = RetryPolicy(
    attempts=1_000_000,  # the deadline bounds it: waits of 50 ms doubling to 1 s, for 600 s
    initial_s=0.05,
    max_s=1.0,
    deadline_s=BUSY_WAIT_S,
    transient=is_busy,
)
"""How long the sink's own calls wait out BUSY: another apply script may run for minutes."""


def connect(url: Secret, *, retries: int, socket_timeout: float, connect_timeout: float) -> Any:
    """A client that retries connection errors with backoff (a restarting Redis, a lost reply).

    Every command the sink sends is idempotent or checked server-side, so a re-send is safe.
    """
    from redis.backoff import ExponentialBackoff
    from redis.retry import Retry

    return redis.Redis.from_url(
        url.reveal(),
        socket_timeout=socket_timeout,
        socket_connect_timeout=connect_timeout,
        retry=Retry(ExponentialBackoff(cap=1.0, base=0.05), retries),
        health_check_interval=30,
    )


def patient(call: Callable[[], T], policy: RetryPolicy = BUSY_POLICY) -> T:
    """Run ``call``; while Redis answers BUSY (another query's apply script runs), retry.

    BUSY means the command was not run. ``call`` must build any pipeline afresh. Any other
    error, and BUSY past the policy's deadline, is raised as it is.
    """
    return policy.call(call)


def script_error(exc: redis.ResponseError, where: str) -> ExactlyOnceError:
    """A refusal of the Redis at ``where`` (a script's ``EO_*`` error) as an ExactlyOnceError."""
    text = str(exc)
    if "EO_HEAD_LOST" in text:
        return ExactlyOnceError(
            f"the sink head is missing from the Redis at {where}: it lost its data (a restart "
            "without persistence, a flush) or the head was reset while the query ran. Refusing "
            "to write: run the sink's Redis with appendonly yes, then restart the query."
        )
    return ExactlyOnceError(f"Redis at {where}: {text}")


@contextlib.contextmanager
def reaching(url: Secret, where: str) -> Iterator[None]:
    """Connection failures as SinkUnavailableError; never with the password."""
    try:
        yield
    except (redis.ConnectionError, redis.TimeoutError) as exc:
        reason = scrub(str(exc).strip(), dsn_password(url.reveal()))
        raise SinkUnavailableError(f"cannot reach Redis at {where}: {reason}") from None
    except redis.ResponseError as exc:
        raise script_error(exc, where) from None


def require_standalone(client: Any, head_key: str) -> None:
    """Refuse a Redis Cluster, and a ``head_key`` that holds something else than a hash."""
    client.ping()
    if int(client.info("cluster").get("cluster_enabled", 0)):
        raise ConfigError(
            "url",
            "Redis Cluster is not supported: one atomic step spans the records' "
            "keys, which a cluster spreads over slots. Use a standalone primary.",
        )
    kind = client.type(head_key).decode()
    if kind not in ("none", "hash"):
        raise ConfigError("prefix", f"{head_key} already holds a {kind}")
