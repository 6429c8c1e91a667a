"""The end and start offsets the Kafka sink reads are asked again through a leader failover
(a request to a broker that was SIGKILLed times out, or fails with ``_DESTROY_BROKER`` once
the cluster fences it: tests/crash/test_kafka_failover.py), after a metadata refresh, and only
then."""

from __future__ import annotations

from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException

from exactlyonce.connectors.kafka.consume import failover_error, watermarks


class FlakyClient:
    """Raises the given errors, one per call, then answers (0, 5)."""

    def __init__(self, *errors: KafkaError) -> None:
        self.errors = list(errors)
        self.calls = 0
        self.refreshes = 0

    def list_topics(self, timeout: float) -> None:
        self.refreshes += 1

    def get_watermark_offsets(self, tp: Any, timeout: float, cached: bool) -> tuple[int, int]:
        self.calls += 1
        assert cached is False, "never a cached answer"
        if self.errors:
            raise KafkaException(self.errors.pop(0))
        return 0, 5


def test_a_failover_is_waited_out() -> None:
    client = FlakyClient(
        KafkaError(KafkaError._DESTROY_BROKER), KafkaError(KafkaError.NOT_LEADER_FOR_PARTITION)
    )
    assert watermarks(client, "t", 0, 1.0) == (0, 5)  # type: ignore[arg-type]
    assert client.calls == 3
    assert client.refreshes == 2, "the metadata (who leads now) is asked before each retry"


@pytest.mark.parametrize(
    "error",
    [
        KafkaError(KafkaError.UNKNOWN_TOPIC_OR_PART),
        KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED),
        KafkaError(KafkaError._DESTROY_BROKER, fatal=True),
    ],
)
def test_what_no_failover_explains_is_raised_at_once(error: KafkaError) -> None:
    client = FlakyClient(error)
    with pytest.raises(KafkaException):
        watermarks(client, "t", 0, 1.0)  # type: ignore[arg-type]
    assert client.calls == 1
    assert not failover_error(KafkaException(error))
    assert not failover_error(RuntimeError("not Kafka's"))
