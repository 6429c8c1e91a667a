"""An aggregation in update mode, upserted into PostgreSQL: one row per key, at its latest epoch.

make services && .venv/bin/python examples/upsert_aggregation.py

The events hold a duplicate (sent twice by an at-least-once producer): ``dropDuplicates``
drops it before the aggregation. Each epoch, Spark emits the users whose totals changed; the
sink replaces their rows, but only with a value of an epoch at least as new as the stored one.
"""

import os
from pathlib import Path

import psycopg
from psycopg import sql
from pyspark.sql import functions as F

from exactlyonce.connectors import PostgresSink
from exactlyonce.integration.envfile import service_env
from exactlyonce.integration.spark import session, start_stream

name = os.environ.get("EXAMPLE_NAME", "upsert_example")  # query and table name
env = service_env()  # the local services of `make services`
inbox = Path(".exactlyonce/upsert-example/input")
inbox.mkdir(parents=True, exist_ok=True)
files = {
    "part-0.json": '{"event_id": "e1", "user": "ann", "amount": 5}\n'
    '{"event_id": "e2", "user": "bob", "amount": 7}\n'
    '{"event_id": "e1", "user": "ann", "amount": 5}\n',  # sent twice: counted once
    "part-1.json": '{"event_id": "e3", "user": "ann", "amount": 3}\n',
}
for n, (file, lines) in enumerate(files.items()):
    (inbox / file).write_text(lines)
    os.utime(inbox / file, (1_700_000_000 + n, 1_700_000_000 + n))  # Spark reads by mtime

spark = session("upsert-example")
events = (
    spark.readStream.schema("event_id STRING, user STRING, amount BIGINT")
    .option("maxFilesPerTrigger", 1)  # one file per epoch
    .json(str(inbox))
)
totals = (
    events.dropDuplicates(["event_id"])
    .groupBy("user")
    .agg(F.count(F.lit(1)).alias("n"), F.sum("amount").alias("total"))
)
sink = PostgresSink(env["EXACTLYONCE_PG_DSN"], name, ["user"], name, mode="upsert")
query = start_stream(
    totals, sink, ".exactlyonce/upsert-example/ckpt", available_now=True, output_mode="update"
)
query.awaitTermination()
for report in sink.reports:
    print(report)
spark.stop()

with psycopg.connect(env["EXACTLYONCE_PG_DSN"]) as conn:
    table = sql.Identifier(name)
    print(
        conn.execute(
            sql.SQL('SELECT "user", n, total, epoch FROM {} ORDER BY 1').format(table)
        ).fetchall()
    )
