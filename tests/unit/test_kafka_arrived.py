"""``arrived``: what a Kafka consumer has, without waiting for a batch to fill. confluent-kafka's
``consume(n, timeout)`` returns only at n records or at the timeout, so every read of a few
records (a Real-time Mode frontier, a head) paid the whole timeout (pure logic, a fake
consumer)."""

from __future__ import annotations

from exactlyonce.connectors.kafka.consume import arrived


class FakeConsumer:
    def __init__(self, records: list[str]) -> None:
        self.records = records
        self.calls: list[tuple[str, float]] = []

    def poll(self, timeout: float) -> str | None:
        self.calls.append(("poll", timeout))
        return self.records.pop(0) if self.records else None

    def consume(self, num_messages: int, timeout: float) -> list[str]:
        self.calls.append(("consume", timeout))
        taken, self.records = self.records[:num_messages], self.records[num_messages:]
        return taken


def test_it_waits_only_for_the_first_record_then_takes_what_was_fetched() -> None:
    client = FakeConsumer(["a", "b", "c"])
    assert arrived(client, 0.02, most=1000) == ["a", "b", "c"]  # type: ignore[arg-type]
    assert client.calls == [("poll", 0.02), ("consume", 0)]


def test_nothing_within_the_wait_is_an_empty_list() -> None:
    client = FakeConsumer([])
    assert arrived(client, 0.02) == []  # type: ignore[arg-type]
    assert client.calls == [("poll", 0.02)]


def test_it_takes_at_most_most_records() -> None:
    client = FakeConsumer(list("abcdef"))
    assert arrived(client, 0.02, most=4) == list("abcd")  # type: ignore[arg-type]
    assert client.records == ["e", "f"]
