"""The exactly-once Kafka sink (:class:`KafkaSink`: its class docstring states the guarantee
and mechanism) and the recipe to read its topic exactly once (:mod:`.reader`).

- :mod:`.protocol`: header names, control-topic keys, the head record;
- :mod:`.sink`: :class:`KafkaSink`, the driver side; :mod:`.preflight` (topics, broker
  probe), :mod:`.head` (the head store on the control topic), :mod:`.projection` (Spark
  columns), :mod:`.clients` (the driver's Kafka clients);
- :mod:`.writer`, :mod:`.task`, :mod:`.transaction`, :mod:`.target`: the executor side, one
  transaction per shard (a buffer's frames: :mod:`exactlyonce.connectors.base.frames`);
- :mod:`.partition_task`, :mod:`.fingerprint`, :mod:`.datasource`: the Spark data source
  path's tasks and driver hooks;
- :mod:`.buffer`, :mod:`.buffer_config`, :mod:`.buffer_check`: a Kafka buffer in front of
  another sink (the Spark side);
- :mod:`.kind` (the registry entry), :mod:`.audit` (the audit reader), :mod:`.parts` (what
  the preflight and check use of the sink);
- :mod:`.reader` (with :mod:`.consume`, :mod:`.range_reader`): reading it back;
- :mod:`.connect_json`: Kafka Connect's JSON envelope (``value="json-with-schema"``).
"""

from __future__ import annotations

from exactlyonce.connectors.base.frames import frame_bounds
from exactlyonce.connectors.kafka.clients import init_transactions
from exactlyonce.connectors.kafka.config import KafkaSinkConfig
from exactlyonce.connectors.kafka.preflight import PROBE_RETENTION_MS, PROBE_WAIT_S
from exactlyonce.connectors.kafka.protocol import (
    DEAD_LETTER_PAYLOAD_LIMIT,
    DEFAULT_CONTROL_TOPIC,
    EPOCH_COLUMN,
    ID_COLUMN,
    KAFKA_DEFAULT_MAX_TRANSACTION_TIMEOUT_MS,
    KEY_COLUMN,
    MIN_TRANSACTION_TIMEOUT_MS,
    RESERVED_COLUMNS,
    VALUE_COLUMN,
    dead_letter_topic_for,
    default_sink_name,
    transactional_id,
)
from exactlyonce.connectors.kafka.reader import Commits, load_commits, read_exactly_once
from exactlyonce.connectors.kafka.sink import KafkaSink
from exactlyonce.connectors.kafka.target import KafkaTarget
from exactlyonce.connectors.kafka.task import KafkaShardTask
from exactlyonce.connectors.kafka.writer import KafkaShardWriter

__all__ = [
    "DEAD_LETTER_PAYLOAD_LIMIT",
    "DEFAULT_CONTROL_TOPIC",
    "EPOCH_COLUMN",
    "ID_COLUMN",
    "KAFKA_DEFAULT_MAX_TRANSACTION_TIMEOUT_MS",
    "KEY_COLUMN",
    "MIN_TRANSACTION_TIMEOUT_MS",
    "PROBE_RETENTION_MS",
    "PROBE_WAIT_S",
    "RESERVED_COLUMNS",
    "VALUE_COLUMN",
    "Commits",
    "KafkaShardTask",
    "KafkaShardWriter",
    "KafkaSink",
    "KafkaSinkConfig",
    "KafkaTarget",
    "dead_letter_topic_for",
    "default_sink_name",
    "frame_bounds",
    "init_transactions",
    "load_commits",
    "read_exactly_once",
    "transactional_id",
]
