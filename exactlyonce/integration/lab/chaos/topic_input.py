"""``exactlyonce chaos --events N`` for a Kafka source: the seeded records produced into the
source's topic, created here, all of them acknowledged before the first run starts. The runs
then read them a few at a time (the source's ``max_offsets_per_trigger``), so the faults land
mid-stream as they do between a files source's files.

Why all before the first run, not a producer going on while runs are killed: the expected
IDs are then complete before any fault (with ``id_from: source`` they are the delivery
reports' coordinates), the input is the plan of the seed and nothing else (a producer riding
out the schedule's broker restarts would add re-sends of its own), and it leaves the two
cores to the runs and faults under test. A capped batch size alone keeps the stream long:
the soak's input is read in as many batches as a files cell's has files."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from confluent_kafka.admin import AdminClient

from exactlyonce.connectors.kafka.clients import client_log
from exactlyonce.errors import ConfigError
from exactlyonce.integration.config.sources import KafkaSourceConfig
from exactlyonce.integration.lab.events import Record
from exactlyonce.integration.lab.upstream.producer import Coordinates, produce
from exactlyonce.integration.lab.upstream.topics import TOPIC_TIMEOUT_S, recreate_topics

SOURCE_PARTITIONS = 4


def source_topic(source: KafkaSourceConfig) -> str:
    """The one topic the source subscribes to, else ConfigError."""
    topic = source.topic or ""
    if source.subscribe_pattern is not None or "," in topic:
        raise ConfigError(
            "--events", "produces into one topic: give the Kafka source a single topic"
        )
    return topic


def produce_input(
    source: KafkaSourceConfig, records: Sequence[Record], key: str
) -> tuple[str, list[Coordinates]]:
    """Create the source's topic (``SOURCE_PARTITIONS`` partitions) and produce ``records``
    into it, keyed by ``key``; where they went, and each record's coordinates as the
    producer's delivery reports give them (the IDs of ``id_from: source``). A topic that
    exists already is refused: chaos never writes into, nor deletes, a topic it did not
    create (name one per run)."""
    topic = source_topic(source)
    if topic in _topics(source.bootstrap_servers):
        raise ConfigError(
            "--events",
            f"topic {topic!r} exists: --events creates a fresh one (name it per run, as "
            "examples/soak/*.yaml do with ${SOAK_RUN})",
        )
    recreate_topics(source.bootstrap_servers, (), {topic: SOURCE_PARTITIONS})
    placed = produce(source.bootstrap_servers, topic, records, key_column=key)
    return f"topic {topic} ({SOURCE_PARTITIONS} partitions)", placed


def _topics(bootstrap: str) -> set[str]:
    config: dict[str, Any] = {"bootstrap.servers": bootstrap, "log_level": 3, "logger": client_log}
    return set(AdminClient(config).list_topics(timeout=TOPIC_TIMEOUT_S).topics)
