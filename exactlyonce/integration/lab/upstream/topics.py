"""The lab's Kafka topics, deleted and created afresh (the demo's, and a chaos input's): once
:func:`recreate_topics` returns, the topics to delete are gone (or recreated empty) and the
topics to create exist."""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Mapping
from concurrent.futures import Future
from typing import Any

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

from exactlyonce.connectors.kafka.clients import client_log
from exactlyonce.connectors.kafka.preflight import listed_with_leaders

TOPIC_TIMEOUT_S = 60.0


def recreate_topics(bootstrap: str, delete: Collection[str], create: Mapping[str, int]) -> None:
    """Delete ``delete`` and ``create``'s topics, wait until the broker has forgotten them,
    then create each of ``create`` with its number of partitions. Idempotent."""
    config: dict[str, Any] = {"bootstrap.servers": bootstrap, "log_level": 3, "logger": client_log}
    admin = AdminClient(config)  # errors only, into Python's logging
    doomed = set(delete) | set(create)
    present = doomed & _topics(admin)
    if present:
        for name, future in admin.delete_topics(sorted(present)).items():
            _result(future, name, KafkaError.UNKNOWN_TOPIC_OR_PART)
    _wait(lambda: not doomed & _topics(admin), f"topics {sorted(doomed)} to be deleted")
    for name, partitions in create.items():
        _create(admin, name, partitions)
    # CreateTopics answers before every broker's metadata has the topic: a reader right after
    # could still be told UNKNOWN_TOPIC_OR_PART. Wait until each one has its partitions, led.
    _wait(lambda: _ready(admin, create), f"topics {sorted(create)} to have leaders")


def _create(admin: AdminClient, name: str, partitions: int) -> None:
    """A deleted topic's name may be refused for a moment after the deletion: retried."""
    deadline = time.monotonic() + TOPIC_TIMEOUT_S
    while True:
        topic = NewTopic(name, num_partitions=partitions, replication_factor=-1)
        try:
            admin.create_topics([topic])[name].result(TOPIC_TIMEOUT_S)
            return
        except KafkaException as exc:
            if exc.args[0].code() == KafkaError.TOPIC_ALREADY_EXISTS:
                return
            if time.monotonic() > deadline:
                raise SystemExit(f"could not create topic {name}: {exc}") from None
            time.sleep(0.5)


def _ready(admin: AdminClient, create: Mapping[str, int]) -> bool:
    topics = admin.list_topics(timeout=TOPIC_TIMEOUT_S).topics
    return all(
        listed_with_leaders(topics.get(name)) and len(topics[name].partitions) == partitions
        for name, partitions in create.items()
    )


def _topics(admin: AdminClient) -> set[str]:
    return set(admin.list_topics(timeout=TOPIC_TIMEOUT_S).topics)


def _result(future: Future[None], name: str, ignore: int) -> None:
    try:
        future.result(TOPIC_TIMEOUT_S)
    except KafkaException as exc:
        if exc.args[0].code() != ignore:
            raise SystemExit(f"could not delete topic {name}: {exc}") from None


def _wait(done: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + TOPIC_TIMEOUT_S
    while not done():
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out waiting for {what}")
        time.sleep(0.3)
