"""KafkaSink(value="avro"): Avro binary values, written by real Spark to the genuine broker and
read by a plain read_committed consumer (confluent-kafka).

Each value is decoded with fastavro, not Spark, under the writer schema written out here by
hand from the documented mapping (record ``topLevelRecord``, no namespace, a nullable column is
the union ``[type, "null"]``, a timestamp is ``timestamp-micros``), so a value Spark wrote under
another schema than the one documented fails the test.
"""

from __future__ import annotations

import datetime as dt
import io
import json
from typing import Any

import fastavro
import pytest
from confluent_kafka import Consumer, KafkaError, TopicPartition
from pyspark.sql import SparkSession

from exactlyonce.connectors import ConfigError, KafkaSink
from exactlyonce.connectors.kafka.avro import avro_schema

pytestmark = pytest.mark.integration

ROWS = """
SELECT * FROM VALUES
  ('k1', 7, 2147483648, 1.5D, TIMESTAMP'2024-02-03 04:05:06.789'),
  ('k2', NULL, -1, NULL, NULL),
  ('k3', -2147483648, 0, -0.25D, TIMESTAMP'1969-12-31 23:59:59.999999')
AS t(event_id, small, big, ratio, at)
"""
UTC = dt.timezone.utc
EXPECTED = {
    "k1": {
        "event_id": "k1",
        "small": 7,
        "big": 2147483648,
        "ratio": 1.5,
        "at": dt.datetime(2024, 2, 3, 4, 5, 6, 789000, tzinfo=UTC),  # session time zone UTC
    },
    "k2": {"event_id": "k2", "small": None, "big": -1, "ratio": None, "at": None},
    "k3": {
        "event_id": "k3",
        "small": -(2**31),
        "big": 0,
        "ratio": -0.25,
        "at": dt.datetime(1969, 12, 31, 23, 59, 59, 999999, tzinfo=UTC),
    },
}
WRITER_SCHEMA = {
    "type": "record",
    "name": "topLevelRecord",
    "fields": [
        {"name": "event_id", "type": "string"},
        {"name": "small", "type": ["int", "null"]},
        {"name": "big", "type": "long"},
        {"name": "ratio", "type": ["double", "null"]},
        {"name": "at", "type": [{"type": "long", "logicalType": "timestamp-micros"}, "null"]},
    ],
}


def read_committed(bootstrap: str, topic: str) -> list[tuple[bytes | None, bytes]]:
    """Every record a plain read_committed consumer sees, each partition read to its end."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"{topic}-plain",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
        }
    )
    try:
        partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
        consumer.assign([TopicPartition(topic, p, 0) for p in partitions])
        at_end: set[int] = set()
        records: list[tuple[bytes | None, bytes]] = []
        while at_end != set(partitions):
            message = consumer.poll(30)
            assert message is not None, f"no end of partitions {set(partitions) - at_end}"
            error = message.error()
            if error is not None:
                assert error.code() == KafkaError._PARTITION_EOF, error
                at_end.add(message.partition())
                continue
            records.append((message.key(), message.value() or b""))
        return records
    finally:
        consumer.close()


def decode(value: bytes) -> Any:
    parsed = fastavro.parse_schema(WRITER_SCHEMA)
    stream = io.BytesIO(value)
    record = fastavro.schemaless_reader(stream, parsed, None)
    assert stream.read() == b"", "one Avro datum per value, nothing after it"
    return record


def test_values_are_avro_records_a_plain_consumer_decodes_once(
    spark: SparkSession, bootstrap: str, unique_name: str
) -> None:
    df = spark.sql(ROWS)
    assert json.loads(avro_schema(df.schema)) == WRITER_SCHEMA, "the documented mapping"
    sink = KafkaSink(
        bootstrap, unique_name, ["event_id"], unique_name, value="avro",
        key_column="event_id", create_topic=True, partitions=2,
    )  # fmt: skip
    sink(df, 0)
    sink(df, 0)  # a replayed epoch writes nothing again
    sink(spark.sql(ROWS).where("event_id = 'k1'"), 1)  # a duplicate ID: produced once
    assert sink.hides_aborted, "the genuine broker hides aborted records from read_committed"
    records = read_committed(bootstrap, unique_name)
    assert sorted(key or b"" for key, _ in records) == [b"k1", b"k2", b"k3"], "each once"
    decoded = {(key or b"").decode(): decode(value) for key, value in records}
    assert decoded == EXPECTED


def test_a_type_avro_cannot_hold_fails_preflight_naming_the_column(
    spark: SparkSession, bootstrap: str, unique_name: str
) -> None:
    df = spark.sql("SELECT 'a' AS event_id, map(1, 'x') AS by_number")
    sink = KafkaSink(
        bootstrap, unique_name, ["event_id"], unique_name, value="avro", create_topic=True,
    )  # fmt: skip
    with pytest.raises(ConfigError) as refused:
        sink.preflight(df.schema)
    assert refused.value.field == "value"
    assert "'by_number'" in refused.value.reason and "Avro" in refused.value.reason
