"""Exactly-once from JSON files into Elasticsearch with the Python API.

make services && .venv/bin/python examples/elasticsearch_sink.py

Uses the cluster at $ELASTICSEARCH_URL (``docker compose up -d elasticsearch``: security off,
http://localhost:9200). Without it, it starts the repository's Elasticsearch test server
(exactlyonce/integration/lab/es_stand_in/), which speaks the part of the REST API the sink uses.
"""

import os
from pathlib import Path

from elasticsearch import Elasticsearch

from exactlyonce.connectors import ElasticsearchSink
from exactlyonce.integration.envfile import service_env
from exactlyonce.integration.spark import session, start_stream

name = os.environ.get("EXAMPLE_NAME", "es-example")  # query and index name
url = os.environ.get("ELASTICSEARCH_URL")
if not url:
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository root
    from exactlyonce.integration.lab.es_stand_in import EsTestServer

    url = EsTestServer().start().url
    print(f"no ELASTICSEARCH_URL: using the test server at {url}")

inbox = Path(".exactlyonce/es-example/input")
inbox.mkdir(parents=True, exist_ok=True)
(inbox / "part-0.json").write_text(
    '{"event_id": "a1", "user_id": 1, "action": "view"}\n'
    '{"event_id": "a2", "user_id": 2, "action": "click"}\n'
    '{"event_id": "a1", "user_id": 1, "action": "view"}\n'  # a duplicate: written once
)

spark = session("es-example")
events = spark.readStream.schema("event_id STRING, user_id BIGINT, action STRING").json(str(inbox))
sink = ElasticsearchSink(
    hosts=url,
    index=f"{name}-events",
    id_columns=["event_id"],  # the document _id is the record ID
    query_name=name,
    op_type="create",  # a 409 is "already written"; or "index" to overwrite
    redis_url=service_env()["EXACTLYONCE_REDIS_URL"],  # the dedup catalog; or dedup=False
)
query = start_stream(events, sink, ".exactlyonce/es-example/checkpoint", available_now=True)
query.awaitTermination()
for report in sink.reports:
    print(report)
with Elasticsearch(url) as es:
    es.indices.refresh(index=f"{name}-events")
    print(es.count(index=f"{name}-events")["count"], "documents")
spark.stop()
