"""Spark writes a Kafka buffer topic and returns; a drainer moves the records into PostgreSQL.

make services && .venv/bin/python examples/buffered_postgres.py
"""

import os
from pathlib import Path

import psycopg
from psycopg import sql

from exactlyonce.buffer import Buffered, Drainer, KafkaBuffer
from exactlyonce.connectors import PostgresSink
from exactlyonce.integration.envfile import service_env
from exactlyonce.integration.spark import session, start_stream

name = os.environ.get("EXAMPLE_NAME", "buffer_example")  # query, table and topic name
env = service_env()  # the local services of `make services`
inbox = Path(".exactlyonce/buffer-example/input")
inbox.mkdir(parents=True, exist_ok=True)
(inbox / "part-0.json").write_text(
    '{"event_id": "b1", "amount": 5}\n{"event_id": "b2", "amount": 7}\n'
    '{"event_id": "b1", "amount": 5}\n'  # a duplicate: written once
)

sink = PostgresSink(
    env["EXACTLYONCE_PG_DSN"], name, ["event_id"], name, redis_url=env["EXACTLYONCE_REDIS_URL"]
)
buffer = KafkaBuffer(topic=f"{name}-buffer", bootstrap_servers=env["KAFKA_BOOTSTRAP_SERVERS"])
spark = session("buffer-example")
events = spark.readStream.schema("event_id STRING, amount BIGINT").json(str(inbox))
buffered = Buffered(sink, buffer)  # Spark -> the buffer topic only
query = start_stream(events, buffered, ".exactlyonce/buffer-example/ckpt", available_now=True)
query.awaitTermination()
for report in buffered.reports:
    print(report)
spark.stop()

with Drainer(sink, buffer) as drainer:  # or drainer.start() / .stop() as a thread
    report = drainer.drain_available()  # buffer topic -> PostgreSQL
    print(f"drained {report.written} rows; lag {drainer.lag}")

with psycopg.connect(env["EXACTLYONCE_PG_DSN"]) as conn:
    table = sql.Identifier(name)
    rows = conn.execute(sql.SQL("SELECT event_id, amount FROM {} ORDER BY 1").format(table))
    print(rows.fetchall())
