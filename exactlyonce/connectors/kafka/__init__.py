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

from typing import TYPE_CHECKING

from exactlyonce.lazy import lazy_exports

if TYPE_CHECKING:
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

# Public name -> the module that defines it, imported when the name is first asked for.
_LAZY = {
    "frame_bounds": "exactlyonce.connectors.base.frames",
    "init_transactions": "exactlyonce.connectors.kafka.clients",
    "KafkaSinkConfig": "exactlyonce.connectors.kafka.config",
    "PROBE_RETENTION_MS": "exactlyonce.connectors.kafka.preflight",
    "PROBE_WAIT_S": "exactlyonce.connectors.kafka.preflight",
    "DEAD_LETTER_PAYLOAD_LIMIT": "exactlyonce.connectors.kafka.protocol",
    "DEFAULT_CONTROL_TOPIC": "exactlyonce.connectors.kafka.protocol",
    "EPOCH_COLUMN": "exactlyonce.connectors.kafka.protocol",
    "ID_COLUMN": "exactlyonce.connectors.kafka.protocol",
    "KAFKA_DEFAULT_MAX_TRANSACTION_TIMEOUT_MS": "exactlyonce.connectors.kafka.protocol",
    "KEY_COLUMN": "exactlyonce.connectors.kafka.protocol",
    "MIN_TRANSACTION_TIMEOUT_MS": "exactlyonce.connectors.kafka.protocol",
    "RESERVED_COLUMNS": "exactlyonce.connectors.kafka.protocol",
    "VALUE_COLUMN": "exactlyonce.connectors.kafka.protocol",
    "dead_letter_topic_for": "exactlyonce.connectors.kafka.protocol",
    "default_sink_name": "exactlyonce.connectors.kafka.protocol",
    "transactional_id": "exactlyonce.connectors.kafka.protocol",
    "Commits": "exactlyonce.connectors.kafka.reader",
    "load_commits": "exactlyonce.connectors.kafka.reader",
    "read_exactly_once": "exactlyonce.connectors.kafka.reader",
    "KafkaSink": "exactlyonce.connectors.kafka.sink",
    "KafkaTarget": "exactlyonce.connectors.kafka.target",
    "KafkaShardTask": "exactlyonce.connectors.kafka.task",
    "KafkaShardWriter": "exactlyonce.connectors.kafka.writer",
}


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

__getattr__, __dir__ = lazy_exports(globals(), _LAZY)
