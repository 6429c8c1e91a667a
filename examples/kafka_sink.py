"""Exactly-once from JSON files into a Kafka topic, and reading it back exactly once.

make services && .venv/bin/python examples/kafka_sink.py
"""

import os
from pathlib import Path

from exactlyonce.connectors import KafkaSink
from exactlyonce.connectors.kafka.reader import read_exactly_once
from exactlyonce.integration.envfile import service_env
from exactlyonce.integration.spark import session, start_stream

name = os.environ.get("EXAMPLE_NAME", "kafka-example")  # query and topic name
env = service_env()
bootstrap = env["KAFKA_BOOTSTRAP_SERVERS"]
inbox = Path(".exactlyonce/kafka-example/input")
inbox.mkdir(parents=True, exist_ok=True)
(inbox / "part-0.json").write_text(
    '{"event_id": "a1", "user_id": 1, "action": "view"}\n'
    '{"event_id": "a2", "user_id": 2, "action": "click"}\n'
    '{"event_id": "a1", "user_id": 1, "action": "view"}\n'  # a duplicate: written once
)

spark = session("kafka-example")
events = spark.readStream.schema("event_id STRING, user_id BIGINT, action STRING").json(str(inbox))
sink = KafkaSink(
    bootstrap_servers=bootstrap,
    topic=f"{name}-events",
    id_columns=["event_id"],
    query_name=name,
    key_column="event_id",  # the message key; the value is JSON of all columns
    create_topic=True,
    redis_url=env["EXACTLYONCE_REDIS_URL"],  # the dedup catalog; or dedup=False
)
query = start_stream(events, sink, ".exactlyonce/kafka-example/checkpoint", available_now=True)
query.awaitTermination()
for report in sink.reports:
    print(report)
# The consumption recipe: each committed record once, on any Kafka-protocol broker.
for message in read_exactly_once(bootstrap, f"{name}-events", name):
    print(message.key(), message.value())
spark.stop()
