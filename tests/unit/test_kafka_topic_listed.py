"""A topic the preflight just created is waited for until the cluster lists it with a leader
for every partition: the controller accepts a creation before every broker knows the topic,
and the next metadata answer may come from one that does not (a fresh-clone CI run,
2026-12-02: the single test broker answered ``UNKNOWN_TOPIC_OR_PART`` right after the
creation, and the start failed with "topic ... does not exist")."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from exactlyonce.connectors.kafka.preflight import await_listed
from exactlyonce.errors import SinkUnavailableError


@dataclass
class Partition:
    leader: int = 1
    error: object = None


@dataclass
class Topic:
    partitions: dict[int, Partition] = field(default_factory=lambda: {0: Partition()})
    error: object = None


@dataclass
class Metadata:
    topics: dict[str, Topic]


class Cluster:
    """Answers each list_topics with the next of ``answers`` (the last one from then on)."""

    def __init__(self, *answers: dict[str, Topic]) -> None:
        self.answers = list(answers)
        self.calls = 0

    def list_topics(self, timeout: float) -> Metadata:
        self.calls += 1
        return Metadata(self.answers.pop(0) if len(self.answers) > 1 else self.answers[0])


def test_a_created_topic_is_waited_for_until_listed() -> None:
    cluster = Cluster({}, {"t": Topic(error="UNKNOWN_TOPIC_OR_PART")}, {"t": Topic()})
    await_listed(cluster, ["t"], timeout_s=5.0)
    assert cluster.calls == 3


def test_a_partition_without_a_leader_is_not_listed_yet() -> None:
    cluster = Cluster({"t": Topic({0: Partition(), 1: Partition(leader=-1)})}, {"t": Topic()})
    await_listed(cluster, ["t"], timeout_s=5.0)
    assert cluster.calls == 2


def test_every_topic_is_waited_for() -> None:
    cluster = Cluster({"a": Topic()}, {"a": Topic(), "b": Topic()})
    await_listed(cluster, ["a", "b"], timeout_s=5.0)
    assert cluster.calls == 2


def test_a_topic_never_listed_fails_the_start_naming_it() -> None:
    cluster = Cluster({"a": Topic()})
    with pytest.raises(SinkUnavailableError, match="'b'.*not listed"):
        await_listed(cluster, ["a", "b"], timeout_s=0.3)
    assert cluster.calls >= 2, "asked again before giving up"
