"""A control record (barrier, commit marker, confirmation) produced while the producer's local
queue is full waits for deliveries to free it, like a data record does.

CI failed once on it: the native loop filled a queue of 50 messages with data, and the commit
marker produced right after raised ``BufferError: Local: Queue full``, failing the task. With
the default queue (100,000 messages) the last data record of a large shard can fill it too.
The producer here is a fake (pure logic): full for its first two produce calls.
"""

from __future__ import annotations

from typing import Any

from exactlyonce.connectors.kafka.transaction import TransactionSteps


class _FullTwice:
    def __init__(self) -> None:
        self.refused = 0
        self.polls = 0
        self.produced: list[tuple[str, Any, Any, dict[str, Any]]] = []

    def produce(self, topic: str, value: Any = None, key: Any = None, **kwargs: Any) -> None:
        if self.refused < 2:
            self.refused += 1
            raise BufferError("Local: Queue full")
        self.produced.append((topic, value, key, kwargs))

    def poll(self, timeout: float) -> int:
        self.polls += 1
        return 0


class _Target:
    control_topic = "ctl"
    control_partition = 3


def test_a_control_record_waits_out_a_full_local_queue() -> None:
    steps = TransactionSteps.__new__(TransactionSteps)
    producer = _FullTwice()
    steps.producer = producer  # type: ignore[assignment]
    steps.t = _Target()  # type: ignore[assignment]
    steps._produce_control("marker-key", '{"count": 1}')
    assert producer.refused == 2 and producer.polls == 2
    assert producer.produced == [("ctl", '{"count": 1}', "marker-key", {"partition": 3})]
