"""``exactlyonce run --remote``: a pipeline file's query on Spark Connect (a local server
started by the command: ``local[1]``), the sink pickled to the server as its config, for each
sink. A first run and a restart from the same checkpoint with more files write each event
once, audited where a second write shows, by a client we did not write: PostgreSQL in
``mode: append`` (a second write is a second row; psycopg), Kafka from offset 0 with a
``read_committed`` kafka-python consumer, Redis as a stream (``XRANGE``: a second write is a
second entry), Elasticsearch with ``op_type: index`` on the stand-in (its write counter per
``_id``; no Elasticsearch server is installable here), OpenSearch with ``op_type: index`` on a
genuine node (its own ``_version`` per ``_id``, read over plain HTTP). Each audit is shown
able to fail: one record written again by a plain client is counted twice. The command
prints a line per batch: the sink's own report, which it shares in the Spark Connect session,
or the server's progress for a batch the next one overtook; no password shows in its output
or Spark's event log (Spark Connect logs each plan as text)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg
import pytest

from tests.crash.harness import service_passwords
from tests.support import opensearch_http
from tests.support.connect_port import local_connect_server
from tests.support.es_fixtures import EsHandle
from tests.support.kafka_audit import field_counts
from tests.support.redis_fixtures import SinkRedis
from tests.support.secrets_scan import assert_no_secrets, event_log_conf
from tests.support.write_again import (
    assert_audit_sees_it,
    index_again,
    insert_again,
    produce_again,
    xadd_again,
)

pytestmark = pytest.mark.integration
_BATCH = ("batch ", "epoch ")  # a line per batch: its progress, or the sink's report

PIPELINE = """
query_name: {name}
checkpoint: {work}/checkpoint
trigger: {{available_now: true}}
source:
  type: files
  format: json
  path: {work}/input
  schema: "event_id STRING, n BIGINT"
  max_files_per_trigger: 1
sink:
{sink}  id_columns: [event_id]
  shards: 2
  redis_url: ${{EXACTLYONCE_REDIS_URL}}
spark:
  conf: {conf}
"""

SINKS = {
    "postgres": "  type: postgres\n  dsn: ${{EXACTLYONCE_PG_DSN}}\n  table: {name}\n"
    "  mode: append\n",
    "kafka": "  type: kafka\n  bootstrap_servers: {bootstrap}\n  topic: {name}\n"
    "  create_topic: true\n",
    "redis": "  type: redis\n  url: ${{EXACTLYONCE_SINK_REDIS_URL}}\n"
    "  key_template: {name}:events\n  write: stream\n",
    "elasticsearch": "  type: elasticsearch\n  hosts: [{es_url}]\n  index: {name}\n"
    "  op_type: index\n",
    "opensearch": "  type: opensearch\n  hosts: [{os_url}]\n  index: {name}\n  op_type: index\n",
}


def _stage(work: Path, part: int) -> list[str]:
    (work / "input").mkdir(parents=True, exist_ok=True)
    ids: list[str] = []
    for k in range(2):
        events = [{"event_id": f"p{part}f{k}e{i}", "n": i} for i in range(20)]
        path = work / "input" / f"part-{part}{k}.json"
        path.write_text("".join(json.dumps(e) + "\n" for e in events))
        ids += [f"p{part}f{k}e{i}" for i in range(20)]
    return ids


@pytest.mark.parametrize("kind", [pytest.param(k, marks=getattr(pytest.mark, k)) for k in SINKS])
def test_run_on_spark_connect_writes_once_across_a_restart(
    kind: str,
    request: pytest.FixtureRequest,
    tmp_path: Path,
    services: dict[str, str],
    pg: psycopg.Connection[Any],
    bootstrap: str,
    sink_redis: SinkRedis,
    es: EsHandle,
    unique_name: str,
) -> None:
    conf = json.dumps({"spark.sql.shuffle.partitions": "2", **event_log_conf(tmp_path / "log")})
    # The session's OpenSearch node starts for the cell that writes it only.
    os_url = request.getfixturevalue("opensearch").url if kind == "opensearch" else ""
    sink = SINKS[kind].format(name=unique_name, bootstrap=bootstrap, es_url=es.url, os_url=os_url)
    config = tmp_path / "pipeline.yaml"
    config.write_text(PIPELINE.format(name=unique_name, work=tmp_path, sink=sink, conf=conf))
    env = {
        **os.environ,
        **services,
        "EXACTLYONCE_SINK_REDIS_URL": sink_redis.url,
        "PYSPARK_PYTHON": sys.executable,
    }
    expected: list[str] = []
    outputs = []
    with local_connect_server():
        for part in (0, 1):  # a first run, then a restart from its checkpoint with more files
            expected += _stage(tmp_path, part)
            done = subprocess.run(
                [sys.executable, "-m", "exactlyonce", "run", str(config), "--remote", "local[1]"],
                env=env,
                cwd=tmp_path,
                capture_output=True,
                text=True,
                timeout=600,
            )
            assert done.returncode == 0, done.stderr[-3000:]
            outputs += [done.stdout, done.stderr]
            batches = [line for line in done.stdout.splitlines() if line.startswith(_BATCH)]
            assert len(batches) == 2, done.stdout  # one file per batch, two new files a run
            # The sink's own report reached the client (shared in the session): at least the
            # last batch's, which no later batch can overtake.
            assert re.match(r"epoch \d+: \d+ rows, [1-9]\d* written", batches[-1]), done.stdout
            assert "after 2 batch(es)" in done.stdout
    readers: dict[str, Callable[[], Counter[str]]] = {
        "postgres": lambda: _postgres(pg, unique_name),
        "kafka": lambda: field_counts(bootstrap, unique_name),
        "redis": lambda: _redis(sink_redis, f"{unique_name}:events"),
        "elasticsearch": lambda: _elasticsearch(es, unique_name, len(expected)),
        "opensearch": lambda: _opensearch(os_url, unique_name),
    }
    assert readers[kind]() == dict.fromkeys(expected, 1)
    # The proof can fail: one record written again by a plain at-least-once client shows.
    write_again: dict[str, Callable[[], str]] = {
        "postgres": lambda: insert_again(pg, unique_name, "event_id"),
        "kafka": lambda: json.loads(produce_again(bootstrap, unique_name).value)["event_id"],
        "redis": lambda: xadd_again(sink_redis, f"{unique_name}:events")[b"event_id"].decode(),
        "elasticsearch": lambda: es.docs(unique_name)[index_again(es.url, unique_name)]["event_id"],
        "opensearch": lambda: opensearch_http.docs(os_url, unique_name)[
            index_again(os_url, unique_name)
        ]["event_id"],
    }
    assert_audit_sees_it(kind, readers[kind], write_again[kind])
    texts = {f"output {n}": text for n, text in enumerate(outputs)}
    assert_no_secrets([tmp_path], service_passwords(), texts=texts, expect=["events_*"])


def _postgres(pg: psycopg.Connection[Any], table: str) -> Counter[str]:
    rows = pg.execute(f'SELECT event_id, count(*) FROM "{table}" GROUP BY 1').fetchall()
    return Counter({str(event): int(n) for event, n in rows})


def _redis(server: SinkRedis, stream: str) -> Counter[str]:
    entries = server.client().xrange(stream)
    return Counter(fields[b"event_id"].decode() for _, fields in entries)


def _elasticsearch(es: EsHandle, index: str, expected: int) -> Counter[str]:
    """Writes per document (the stand-in's counter per ``_id``, ``index`` ops included),
    keyed by the document's event_id."""
    writes, docs = es.writes(index), es.docs(index)
    assert len(docs) == expected
    return Counter({str(doc["event_id"]): writes[i] for i, doc in docs.items()})


def _opensearch(url: str, index: str) -> Counter[str]:
    """Writes per document, counted by the OpenSearch node itself (``_version``: every
    index of an ``_id`` bumps it), keyed by the document's event_id."""
    held = opensearch_http.read_index(url, index)
    return Counter({str(doc["event_id"]): version for version, doc in held.values()})
