"""The Real-time Mode tests' end-offset read (tests/support/realtime.py) rides out a new
topic's leader election (NOT_LEADER_FOR_PARTITION from stale metadata: CI once failed on it
in test_realtime_sinks_crash.py) and raises anything else at once."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, KafkaException, TopicPartition

from tests.support.realtime import high_watermark


class Consumer:
    def __init__(self, *errors: int) -> None:
        self.errors = list(errors)
        self.calls = 0

    def get_watermark_offsets(self, tp: TopicPartition, timeout: float) -> tuple[int, int]:
        self.calls += 1
        if self.errors:
            raise KafkaException(KafkaError(self.errors.pop(0)))
        return (0, 42)


def test_a_partition_without_its_leader_yet_is_read_again() -> None:
    consumer = Consumer(KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.LEADER_NOT_AVAILABLE)
    assert high_watermark(consumer, TopicPartition("t", 0), wait_s=0.01) == 42  # type: ignore[arg-type]
    assert consumer.calls == 3


def test_any_other_error_is_raised_at_once() -> None:
    consumer = Consumer(KafkaError._AUTHENTICATION)
    with pytest.raises(KafkaException):
        high_watermark(consumer, TopicPartition("t", 0), wait_s=0.01)  # type: ignore[arg-type]
    assert consumer.calls == 1


def test_a_leader_that_never_comes_is_raised_after_the_deadline() -> None:
    consumer = Consumer(*[KafkaError.NOT_LEADER_FOR_PARTITION] * 1000)
    with pytest.raises(KafkaException):
        high_watermark(consumer, TopicPartition("t", 0), wait_s=0.01, deadline_s=0.1)  # type: ignore[arg-type]
