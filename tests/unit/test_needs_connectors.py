"""A pipeline asks for Spark's Kafka/Avro connector jars only when it uses them, so a file or
rate pipeline runs on a pyspark whose connectors Maven does not serve yet."""

from __future__ import annotations

from typing import Any

import pytest

from exactlyonce.integration.config import parse_config

PG = {"type": "postgres", "dsn": "postgresql://app@db/app", "table": "t", "id_columns": ["value"]}
KAFKA = {"type": "kafka", "bootstrap_servers": "k:9092", "topic": "out", "id_columns": ["value"]}
KAFKA_SOURCE = {
    "type": "kafka",
    "bootstrap_servers": "k:9092",
    "topic": "in",
    "schema": "value BIGINT",
}


def _pipeline(source: dict[str, Any], sink: dict[str, Any]) -> Any:
    return parse_config(
        {
            "query_name": "q",
            "checkpoint": "ckpt",
            "source": source,
            "sink": {**sink, "dedup": False},
        }
    )


@pytest.mark.parametrize(
    ("source", "sink", "needed"),
    [
        ({"type": "rate"}, PG, False),
        ({"type": "rate"}, KAFKA, False),  # the sink writes with confluent-kafka
        ({"type": "rate"}, {**KAFKA, "value": "avro"}, True),  # spark-avro encodes
        (KAFKA_SOURCE, PG, True),  # Spark's Kafka source
    ],
)
def test_connectors_only_where_the_pipeline_uses_them(
    source: dict[str, Any], sink: dict[str, Any], needed: bool
) -> None:
    assert _pipeline(source, sink).needs_spark_connectors() is needed
