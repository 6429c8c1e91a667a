"""Exactly-once from JSON files into PostgreSQL with the Python API.

make services && python examples/quickstart.py
"""

import os
from pathlib import Path

from exactlyonce.connectors import PostgresSink
from exactlyonce.integration.envfile import service_env
from exactlyonce.integration.spark import session, start_stream

name = os.environ.get("EXAMPLE_NAME", "quickstart")  # query and table name
env = service_env()  # $EXACTLYONCE_PG_DSN etc., else .exactlyonce/services.env
inbox = Path(".exactlyonce/quickstart/input")
inbox.mkdir(parents=True, exist_ok=True)
(inbox / "part-0.json").write_text(
    '{"event_id": "a", "user_id": 1, "action": "click"}\n'
    '{"event_id": "b", "user_id": 2, "action": "view"}\n'
    '{"event_id": "a", "user_id": 1, "action": "click"}\n'  # a duplicate: stored once
)

spark = session("quickstart")
events = spark.readStream.schema("event_id STRING, user_id BIGINT, action STRING").json(str(inbox))
sink = PostgresSink(
    dsn=env["EXACTLYONCE_PG_DSN"],
    table=f"{name}_events",
    id_columns=["event_id"],
    query_name=name,
    redis_url=env["EXACTLYONCE_REDIS_URL"],  # the dedup catalog; or dedup=False
)
query = start_stream(events, sink, ".exactlyonce/quickstart/checkpoint", available_now=True)
query.awaitTermination()
for report in sink.reports:
    print(report)
spark.stop()
