"""The drainer's retry policy (exactlyonce.buffer.drain.retries): the waits it always had,
configuration errors never retried."""

from __future__ import annotations

import pytest

from exactlyonce.buffer.drain.retries import drain_retry_policy, retriable
from exactlyonce.errors import CheckpointResetError, ConfigError, SinkUnavailableError


def test_waits_double_from_a_quarter_second_up_to_max_backoff() -> None:
    waits: list[float] = []
    calls = 0

    def flaky() -> str:
        nonlocal calls
        calls += 1
        if calls < 7:
            raise SinkUnavailableError("down")
        return "ok"

    policy = drain_retry_policy(2.0)
    retrying = policy.retrying(lambda _e, _n, wait: waits.append(wait)).copy(sleep=lambda _s: None)
    assert retrying(flaky) == "ok"
    assert waits == [0.25, 0.5, 1.0, 2.0, 2.0, 2.0]


@pytest.mark.parametrize(
    "error", [ConfigError("table", "no unique index"), CheckpointResetError("reset")]
)
def test_configuration_errors_are_never_retried(error: Exception) -> None:
    assert not retriable(error)
    assert retriable(SinkUnavailableError("down")) and retriable(RuntimeError("broker"))
    assert not retriable(KeyboardInterrupt())


def test_a_small_max_backoff_caps_the_first_wait_too() -> None:
    policy = drain_retry_policy(0.1)
    assert policy.delay(1) == policy.delay(5) == 0.1
