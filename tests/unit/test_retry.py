"""The one retry policy: attempts, capped exponential waits, transient vs. fatal, pickling."""

from __future__ import annotations

import pickle

import pytest

from exactlyonce.retry import NO_RETRY, RetryPolicy, always


class Transient(Exception):
    pass


def transient_only(exc: BaseException) -> bool:
    return isinstance(exc, Transient)


def failing(times: int, error: Exception) -> tuple[list[int], object]:
    calls: list[int] = []

    def fn() -> str:
        calls.append(1)
        if len(calls) <= times:
            raise error
        return "done"

    return calls, fn


def test_retries_transient_errors_then_returns() -> None:
    policy = RetryPolicy(attempts=4, initial_s=0, max_s=0, transient=transient_only)
    calls, fn = failing(3, Transient("x"))
    seen: list[tuple[int, float]] = []
    assert policy.call(fn, on_retry=lambda e, n, w: seen.append((n, w))) == "done"  # type: ignore[arg-type]
    assert len(calls) == 4
    assert [n for n, _ in seen] == [1, 2, 3]


def test_gives_up_after_attempts_with_the_last_error() -> None:
    policy = RetryPolicy(attempts=3, initial_s=0, max_s=0, transient=always)
    calls, fn = failing(10, Transient("still down"))
    with pytest.raises(Transient, match="still down"):
        policy.call(fn)  # type: ignore[arg-type]
    assert len(calls) == 3


def test_fatal_errors_are_raised_at_once() -> None:
    policy = RetryPolicy(attempts=5, initial_s=0, max_s=0, transient=transient_only)
    calls, fn = failing(10, KeyError("fatal"))
    with pytest.raises(KeyError):
        policy.call(fn)  # type: ignore[arg-type]
    assert len(calls) == 1
    calls, fn = failing(10, Transient("x"))
    with pytest.raises(Transient):
        NO_RETRY.call(fn, transient=always)  # type: ignore[arg-type]
    assert len(calls) == 1


def test_waits_are_capped_exponential() -> None:
    policy = RetryPolicy(attempts=7, initial_s=0.5, max_s=4.0)
    assert list(policy.waits()) == [0.5, 1.0, 2.0, 4.0, 4.0, 4.0]
    assert policy.retries == 6
    seen: list[float] = []
    quick = policy.replace(initial_s=0.001, max_s=0.004, transient=always)
    calls, fn = failing(4, Transient("x"))
    quick.call(fn, on_retry=lambda e, n, w: seen.append(w))  # type: ignore[arg-type]
    assert seen == [0.001, 0.002, 0.004, 0.004]


def test_policy_pickles_for_executor_tasks() -> None:
    policy = RetryPolicy(attempts=2, transient=transient_only)
    assert pickle.loads(pickle.dumps(policy)) == policy


def test_refuses_nonsense() -> None:
    with pytest.raises(ValueError, match="attempts"):
        RetryPolicy(attempts=0)
    with pytest.raises(ValueError, match="max_s"):
        RetryPolicy(initial_s=2, max_s=1)
