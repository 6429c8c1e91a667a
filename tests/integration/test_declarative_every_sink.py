"""Spark Declarative Pipelines into every sink at once: one pipeline, five exactlyonce sinks
(PostgreSQL, Kafka, Redis, Elasticsearch: the stand-in lab/es_stand_in/, as no
Elasticsearch server is installable here, and a genuine OpenSearch node), one flow each,
running concurrently on the local Spark Connect server ``spark-pipelines run`` starts; a
first run and a restart with more files. Each sink is audited by what counts its committed
writes, read with a client we did not write: PostgreSQL's attempts trigger (psycopg), every
record of the topic from offset 0 with a ``read_committed`` kafka-python consumer, the sink
Redis's AOF (SET per key), the stand-in's write counters per ``_id``, OpenSearch's own
``_version`` per ``_id`` over plain HTTP (``op_type: index``: a second write is version 2).
Each audit is shown able to fail: one record per sink written again by a plain
at-least-once client (tests/support/write_again.py) is counted twice by it, and nothing
else changes. Under concurrency each sink's reset guard finds its flow's query by name
(``query_name`` = the flow's name)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from functools import partial
from pathlib import Path
from typing import Any

import psycopg
import pytest

from exactlyonce.connectors import PostgresSink
from tests.support import opensearch_http
from tests.support.audit import install_audit, write_counts
from tests.support.connect_port import local_connect_server
from tests.support.es_fixtures import EsHandle
from tests.support.kafka_audit import field_counts
from tests.support.opensearch_node import OpenSearchNode
from tests.support.redis_fixtures import SinkRedis
from tests.support.write_again import (
    assert_audit_sees_it,
    index_again,
    insert_again,
    produce_again,
    set_again,
)

# The pipeline writes every sink: each sink's marker (tests/conftest.py's SINK_MARKERS).
pytestmark = [
    pytest.mark.integration,
    *(getattr(pytest.mark, sink) for sink in ("postgres", "kafka", "redis", "elasticsearch")),
    pytest.mark.opensearch,
]

SPEC = """\
name: every_sink
storage: {storage}
configuration:
  spark.sql.shuffle.partitions: "2"
libraries:
  - glob:
      include: transformations/**
"""

DEFINITIONS = """\
import os
from pyspark import pipelines as dp
from exactlyonce.integration.declarative import create_sink

NAME = os.environ["EO_NAME"]
COMMON = {
    "id_columns": ["event_id"],
    "shards": 2,
    "redis_url": "${EXACTLYONCE_REDIS_URL}",
    "dedup": {"expected_ids": 2000},
}
SINKS = {
    "to_postgres": {"sink": "postgres", "dsn": "${EXACTLYONCE_PG_DSN}", "table": NAME},
    "to_kafka": {
        "sink": "kafka", "bootstrap_servers": "${EO_BOOTSTRAP}", "topic": NAME,
        "create_topic": True,
    },
    "to_redis": {
        "sink": "redis", "url": "${EXACTLYONCE_SINK_REDIS_URL}", "write": "string",
        "key_template": NAME + ":s:{event_id}",
    },
    "to_elasticsearch": {
        "sink": "elasticsearch", "hosts": "${EO_ES_URL}", "index": NAME, "op_type": "index",
    },
    "to_opensearch": {
        "sink": "opensearch", "hosts": "${EO_OS_URL}", "index": NAME, "op_type": "index",
    },
}


def define(flow, settings):
    create_sink(flow + "_sink", {**COMMON, **settings, "query_name": flow})

    @dp.append_flow(target=flow + "_sink", name=flow)
    def events():
        return (
            spark.readStream.schema("event_id STRING, n BIGINT")
            .option("maxFilesPerTrigger", 1)
            .json(os.environ["EO_INPUT"])
        )


for flow, settings in SINKS.items():
    define(flow, settings)
"""


def _stage(work: Path, part: int) -> list[str]:
    (work / "input").mkdir(parents=True, exist_ok=True)
    ids: list[str] = []
    for k in range(2):
        events = [{"event_id": f"p{part}f{k}e{i}", "n": i} for i in range(25)]
        (work / "input" / f"part-{part}{k}.json").write_text(
            "".join(json.dumps(e) + "\n" for e in events)
        )
        ids += [f"p{part}f{k}e{i}" for i in range(25)]
    return ids


def test_one_pipeline_writes_every_sink_once_across_a_restart(
    tmp_path: Path,
    services: dict[str, str],
    pg_dsn: str,
    pg: psycopg.Connection[Any],
    bootstrap: str,
    sink_redis: SinkRedis,
    es: EsHandle,
    opensearch: OpenSearchNode,
    unique_name: str,
) -> None:
    from pyspark.sql.types import LongType, StringType, StructField, StructType

    schema = StructType([StructField("event_id", StringType()), StructField("n", LongType())])
    PostgresSink(pg_dsn, unique_name, ["event_id"], "to_postgres").preflight(schema)
    install_audit(pg, unique_name)
    project = tmp_path / "project"
    (project / "transformations").mkdir(parents=True)
    (project / "spark-pipeline.yml").write_text(
        SPEC.format(storage=(tmp_path / "storage").as_uri())
    )
    (project / "transformations" / "sinks.py").write_text(DEFINITIONS)
    env = {
        **os.environ,
        **services,
        "EXACTLYONCE_SINK_REDIS_URL": sink_redis.url,
        "EO_NAME": unique_name,
        "EO_INPUT": str(tmp_path / "input"),
        "EO_BOOTSTRAP": bootstrap,
        "EO_ES_URL": es.url,
        "EO_OS_URL": opensearch.url,
        "PYSPARK_PYTHON": sys.executable,
        "SPARK_LOCAL_IP": "127.0.0.1",
    }
    spark_pipelines = Path(sys.executable).with_name("spark-pipelines")
    expected: list[str] = []
    with local_connect_server():
        for part in (0, 1):  # a first run, then a restart with two more files
            expected += _stage(tmp_path, part)
            done = subprocess.run(
                [str(spark_pipelines), "run", "--spec", str(project / "spark-pipeline.yml")],
                env=env,
                capture_output=True,
                text=True,
                timeout=600,
            )
            assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
            assert "Run is COMPLETED" in done.stdout + done.stderr
    once = dict.fromkeys(expected, 1)

    rows = pg.execute(f'SELECT event_id, count(*) FROM "{unique_name}" GROUP BY 1').fetchall()
    assert dict(rows) == once, "postgres"
    attempts = partial(write_counts, pg, unique_name)
    assert set(attempts().values()) == {1}, "postgres: attempted twice"

    records = partial(field_counts, bootstrap, unique_name)
    assert records() == once, "kafka"

    sets = partial(sink_redis.write_counts, "SET", f"{unique_name}:s:")
    assert sets() == {f"{unique_name}:s:{i}": 1 for i in expected}, "redis"

    writes = partial(es.writes, unique_name)
    assert len(writes()) == len(expected) and set(writes().values()) == {1}, "elasticsearch"

    versions = partial(opensearch_http.versions, opensearch.url, unique_name)
    assert len(versions()) == len(expected) and set(versions().values()) == {1}, "opensearch"

    # The proof can fail: one record per sink written again by a plain at-least-once client
    # (psycopg, kafka-python, redis-py, urllib) is counted twice by the same audit.
    assert_audit_sees_it(
        "postgres", attempts, lambda: insert_again(pg, unique_name).replace("-", "")
    )
    assert_audit_sees_it(
        "kafka",
        records,
        lambda: json.loads(produce_again(bootstrap, unique_name).value)["event_id"],
    )
    assert_audit_sees_it("redis", sets, lambda: set_again(sink_redis, f"{unique_name}:s:"))
    assert_audit_sees_it("elasticsearch", writes, lambda: index_again(es.url, unique_name))
    assert_audit_sees_it("opensearch", versions, lambda: index_again(opensearch.url, unique_name))
