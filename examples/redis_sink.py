"""Exactly-once from JSON files into Redis hashes with the Python API.

make services && .venv/bin/python examples/redis_sink.py

This writes to the services' Redis (database 1), which runs without persistence: the sink
warns about that. In production, give the sink a Redis with ``appendonly yes`` and
``appendfsync always``, or a restart can lose committed records together with their head.
"""

import os
from pathlib import Path

import redis

from exactlyonce.connectors import RedisSink
from exactlyonce.integration.envfile import service_env
from exactlyonce.integration.spark import session, start_stream

name = os.environ.get("EXAMPLE_NAME", "redis-example")  # query name and key prefix
env = service_env()
catalog_url = env["EXACTLYONCE_REDIS_URL"]  # the dedup catalog (database 0)
sink_url = catalog_url.rsplit("/", 1)[0] + "/1"  # the destination (database 1)
inbox = Path(".exactlyonce/redis-example/input")
inbox.mkdir(parents=True, exist_ok=True)
(inbox / "part-0.json").write_text(
    '{"event_id": "a1", "user_id": 1, "action": "view"}\n'
    '{"event_id": "a2", "user_id": 2, "action": "click"}\n'
    '{"event_id": "a1", "user_id": 1, "action": "view"}\n'  # a duplicate: written once
)

spark = session("redis-example")
events = spark.readStream.schema("event_id STRING, user_id BIGINT, action STRING").json(str(inbox))
sink = RedisSink(
    url=sink_url,
    key_template=name + ":{event_id}",  # one hash per event
    id_columns=["event_id"],
    query_name=name,
    write="hash",  # or "string" (JSON), or "stream" (XADD)
    ttl_seconds=3600,
    redis_url=catalog_url,
)
query = start_stream(events, sink, ".exactlyonce/redis-example/checkpoint", available_now=True)
query.awaitTermination()
for report in sink.reports:
    print(report)
print(redis.Redis.from_url(sink_url).hgetall(f"{name}:a1"))
spark.stop()
