"""``exactlyonce check``: the guarantee report against real services.

Healthy pipelines report every precondition ok and create nothing; ``--create`` creates what a
start would; each failing precondition is reported as failing, with its fix, and exits 1;
no credential and no traceback ever reaches the output. Private ``redis-server`` processes
stand in where a Redis setting must differ from the shared one (never CONFIG SET on it).
"""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
import redis
from confluent_kafka.admin import AdminClient

from exactlyonce.integration import cli
from tests.support.es_fixtures import EsHandle

pytestmark = pytest.mark.integration

SOURCE = {
    "type": "files",
    "format": "json",
    "path": "/tmp/eo-check-never-read",
    "schema": "event_id STRING, v BIGINT",
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def private_redis(tmp_path: Path) -> Iterator[Callable[..., str]]:
    """Start a redis-server of our own with the given settings; its URL."""
    procs: list[subprocess.Popen[bytes]] = []
    binary = shutil.which("redis-server")
    assert binary, "redis-server is needed to start a private Redis"

    def start(**settings: str) -> str:
        port = free_port()
        workdir = tmp_path / f"redis-{port}"
        workdir.mkdir()
        args = [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", ""]
        args += ["--dir", str(workdir)]
        for key, value in settings.items():
            args += [f"--{key.replace('_', '-')}", value]
        procs.append(subprocess.Popen(args, stdout=subprocess.DEVNULL))
        client = redis.Redis(port=port, password=settings.get("requirepass"))
        for _ in range(100):
            try:
                client.ping()
                return f"redis://127.0.0.1:{port}/0"
            except redis.ConnectionError:
                time.sleep(0.05)
        raise AssertionError(f"private redis-server on {port} did not start")

    yield start
    for proc in procs:
        proc.terminate()
        proc.wait(10)


@pytest.fixture
def durable_redis(private_redis: Callable[..., str]) -> str:
    return private_redis(appendonly="yes", appendfsync="always")


def run_check(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], pipeline: dict[str, Any], *extra: str
) -> tuple[int, dict[str, Any], str]:
    """Run ``exactlyonce check`` on ``pipeline``: exit code, JSON report, all output."""
    path = tmp_path / f"pipeline-{uuid.uuid4().hex[:6]}.yaml"
    path.write_text(json.dumps(pipeline))  # JSON is YAML
    code = cli.main(["check", str(path), "--json", *extra])
    out, err = capsys.readouterr()
    return code, json.loads(out), out + err


def statuses(report: dict[str, Any]) -> dict[str, str]:
    found = {c["name"]: c["status"] for c in report["checks"]}
    for part in report["parts"]:
        found.update(statuses(part))
    return found


def check_named(report: dict[str, Any], prefix: str) -> dict[str, Any]:
    return next(c for c in report["checks"] if c["name"].startswith(prefix))


def pipeline(name: str, sink: dict[str, Any], tmp_path: Path, **top: Any) -> dict[str, Any]:
    return {
        "query_name": name,
        "checkpoint": str(tmp_path / "ckpt"),
        "source": SOURCE,
        "sink": sink,
        **top,
    }


def pg_relations(dsn: str, schema: str) -> list[str]:
    with psycopg.connect(dsn) as conn:
        rows = conn.execute(
            "SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE n.nspname = %s AND c.relkind = 'r' ORDER BY 1",
            [schema],
        ).fetchall()
    return [str(r[0]) for r in rows]


@pytest.fixture
def pg_schema(pg_dsn: str) -> Iterator[str]:
    schema = f"chk_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
    yield schema
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(f"DROP SCHEMA {schema} CASCADE")


# -- PostgreSQL ----------------------------------------------------------------------------


def test_postgres_healthy_all_ok_creates_nothing_then_create_creates(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    pg_dsn: str,
    pg_schema: str,
    durable_redis: str,
) -> None:
    sink = {
        "type": "postgres",
        "dsn": pg_dsn,
        "table": f"{pg_schema}.events",
        "id_columns": ["event_id"],
        "redis_url": durable_redis,
    }
    cfg = pipeline("chk-pg", sink, tmp_path, trigger={"processing_time": "1 second"})
    code, report, output = run_check(tmp_path, capsys, cfg)
    assert code == 0, output
    assert set(statuses(report).values()) == {"ok"}, output
    assert report["guarantee"] == "EXACTLY ONCE"
    assert "unique index on record_id" in report["mechanism"]
    assert pg_relations(pg_dsn, pg_schema) == []  # nothing created
    assert "eo-local-pw" not in output and "Traceback" not in output

    code, report, output = run_check(tmp_path, capsys, cfg, "--create")
    assert code == 0, output
    assert pg_relations(pg_dsn, pg_schema) == [
        "exactlyonce_dead_letters",
        "exactlyonce_heads",
        "exactlyonce_shard_commits",
    ]
    assert "present" in check_named(report, "head and control tables")["detail"]


def test_postgres_table_without_unique_index_fails_with_the_fix(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], pg_dsn: str, pg_schema: str
) -> None:
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(
            f"CREATE TABLE {pg_schema}.events (event_id text, v bigint, record_id uuid, "
            "epoch bigint)"
        )
    sink = {
        "type": "postgres",
        "dsn": pg_dsn,
        "table": f"{pg_schema}.events",
        "id_columns": ["event_id"],
        "dedup": False,
    }
    code, report, output = run_check(tmp_path, capsys, pipeline("chk-pg-idx", sink, tmp_path))
    assert code == 1, output
    index = check_named(report, "unique index on record_id")
    assert index["status"] == "failing"
    assert index["fix"] == f"CREATE UNIQUE INDEX ON {pg_schema}.events (record_id)"
    assert report["counts"]["failing"] == 1, output


def test_unreachable_postgres_fails_without_trace_or_password(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    dsn = f"postgresql://app:Very-Secret-pw@127.0.0.1:{free_port()}/app?connect_timeout=2"
    sink = {"type": "postgres", "dsn": dsn, "table": "t", "id_columns": ["event_id"]}
    sink["dedup"] = False
    code, report, output = run_check(tmp_path, capsys, pipeline("chk-down", sink, tmp_path))
    assert code == 1
    down = check_named(report, "PostgreSQL")
    assert down["status"] == "failing" and "cannot connect" in down["detail"]
    assert "start the service" in down["fix"]
    assert "Very-Secret-pw" not in output and "Traceback" not in output


def test_head_of_another_checkpoint_fails(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], pg_dsn: str, pg_schema: str
) -> None:
    sink = {
        "type": "postgres",
        "dsn": pg_dsn,
        "table": f"{pg_schema}.events",
        "id_columns": ["event_id"],
        "dedup": False,
    }
    cfg = pipeline("chk-ckpt", sink, tmp_path)
    assert run_check(tmp_path, capsys, cfg, "--create")[0] == 0
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(
            f"INSERT INTO {pg_schema}.exactlyonce_heads (query_name, sink, epoch, "
            "spark_query_id, num_shards) VALUES (%s, %s, 7, 'spark-query-a', 2)",
            ["chk-ckpt", f"postgres:{pg_schema}.events"],
        )
    (tmp_path / "ckpt").mkdir()
    (tmp_path / "ckpt" / "metadata").write_text('{"id":"spark-query-b"}\n')
    code, report, output = run_check(tmp_path, capsys, cfg)
    assert code == 1, output
    assert check_named(report, "head and checkpoint")["status"] == "failing"
    (tmp_path / "ckpt" / "metadata").write_text('{"id":"spark-query-a"}\n')
    code, report, output = run_check(tmp_path, capsys, cfg)
    assert code == 0, output
    assert "epoch 7" in check_named(report, "head and checkpoint")["detail"]


# -- Redis: the catalog's and the sink's ---------------------------------------------------


def test_catalog_with_eviction_fails(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    pg_dsn: str,
    pg_schema: str,
    private_redis: Callable[..., str],
) -> None:
    catalog = private_redis(appendonly="yes", maxmemory_policy="allkeys-lru")
    sink = {
        "type": "postgres",
        "dsn": pg_dsn,
        "table": f"{pg_schema}.events",
        "id_columns": ["event_id"],
        "redis_url": catalog,
    }
    code, report, output = run_check(tmp_path, capsys, pipeline("chk-lru", sink, tmp_path))
    assert code == 1, output
    policy = check_named(report, "catalog Redis maxmemory-policy")
    assert policy["status"] == "failing" and "allkeys-lru" in policy["detail"]
    assert "noeviction" in policy["fix"]
    everysec = check_named(report, "catalog Redis persistence")
    assert everysec["status"] == "ok"  # everysec is fine for a unique sink's catalog


def test_redis_sink_healthy_then_without_persistence(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], private_redis: Callable[..., str]
) -> None:
    durable = private_redis(appendonly="yes", appendfsync="always", requirepass="Redis-Pw-9")
    url = durable.replace("redis://", "redis://:Redis-Pw-9@")
    sink = {
        "type": "redis",
        "url": url,
        "key_template": "ev:{event_id}",
        "id_columns": ["event_id"],
        "redis_url": url,
    }
    code, report, output = run_check(tmp_path, capsys, pipeline("chk-redis", sink, tmp_path))
    assert code == 0, output
    assert set(statuses(report).values()) == {"ok"}, output
    assert redis.Redis.from_url(url).dbsize() == 0  # nothing written
    assert "Redis-Pw-9" not in output

    volatile = private_redis(appendonly="no")
    code, report, output = run_check(
        tmp_path, capsys, pipeline("chk-redis", {**sink, "url": volatile}, tmp_path)
    )
    assert code == 1, output
    assert check_named(report, "sink Redis persistence")["status"] == "failing"


# -- Kafka -----------------------------------------------------------------------------------


def kafka_topics(bootstrap: str) -> set[str]:
    return set(AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=10).topics)


def test_kafka_healthy_creates_nothing_then_create_probes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], bootstrap: str
) -> None:
    name = f"chk-{uuid.uuid4().hex[:8]}"
    sink = {
        "type": "kafka",
        "bootstrap_servers": bootstrap,
        "topic": f"{name}-out",
        "control_topic": f"{name}-control",
        "create_topic": True,
        "id_columns": ["event_id"],
        "dedup": False,
    }
    cfg = pipeline(name, sink, tmp_path, trigger={"processing_time": "10 seconds"})
    code, report, output = run_check(tmp_path, capsys, cfg)
    assert code == 0, output
    found = statuses(report)
    # a fresh control topic has no probe topic yet: the only thing not checked
    assert found.pop("broker hides aborted records") == "warning", output
    assert set(found.values()) == {"ok"}, output
    assert not {t for t in kafka_topics(bootstrap) if t.startswith(name)}  # nothing created

    code, report, output = run_check(tmp_path, capsys, cfg, "--create")
    assert code == 0, output
    assert set(statuses(report).values()) == {"ok"}, output  # Apache Kafka hides aborted
    assert {f"{name}-out", f"{name}-control", f"{name}-control.probe"} <= kafka_topics(bootstrap)


def test_kafka_trigger_longer_than_transaction_timeout_fails(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], bootstrap: str
) -> None:
    name = f"chk-{uuid.uuid4().hex[:8]}"
    sink = {
        "type": "kafka",
        "bootstrap_servers": bootstrap,
        "topic": f"{name}-out",
        "create_topic": True,
        "transaction_timeout_ms": 30000,
        "id_columns": ["event_id"],
        "dedup": False,
    }
    cfg = pipeline(name, sink, tmp_path, trigger={"processing_time": "1 minute"})
    code, report, output = run_check(tmp_path, capsys, cfg)
    assert code == 1, output
    trigger = check_named(report, "trigger interval")
    assert trigger["status"] == "failing" and "60000" in trigger["detail"]


# -- Elasticsearch, and a sink behind a buffer ---------------------------------------------


def test_elasticsearch_healthy_creates_nothing_then_create_creates(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    es: EsHandle,  # noqa: F811
) -> None:
    index = f"chk-{uuid.uuid4().hex[:8]}"
    sink = {
        "type": "elasticsearch",
        "hosts": es.url,
        "index": index,
        "control_index": f"{index}-control",
        "id_columns": ["event_id"],
        "dedup": False,
    }
    cfg = pipeline("chk-es", sink, tmp_path)
    code, report, output = run_check(tmp_path, capsys, cfg)
    assert code == 0, output
    assert set(statuses(report).values()) == {"ok"}, output
    with es.client() as client:
        assert not client.indices.exists(index=index)
        assert not client.indices.exists(index=f"{index}-control")
    code, report, output = run_check(tmp_path, capsys, cfg, "--create")
    assert code == 0, output
    assert check_named(report, f"index {index}")["detail"] == "present, mapping fits"
    with es.client() as client:
        assert client.indices.exists(index=index)


def test_buffered_pipeline_reports_the_drain_and_its_dead_letters(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    bootstrap: str,
    pg_dsn: str,
    pg_schema: str,
    durable_redis: str,
) -> None:
    topic = f"chk-{uuid.uuid4().hex[:8]}-buffer"
    sink = {
        "type": "postgres",
        "dsn": pg_dsn,
        "table": f"{pg_schema}.events",
        "id_columns": ["event_id"],
        "redis_url": durable_redis,
        "buffer": {"topic": topic, "bootstrap_servers": bootstrap},
    }
    code, report, output = run_check(tmp_path, capsys, pipeline("chk-buf", sink, tmp_path))
    assert code == 0, output
    assert report["guarantee"] == f"EXACTLY ONCE into the buffer topic {topic}"
    drain, dead = report["parts"]
    assert drain["guarantee"] == "EXACTLY ONCE, ATOMIC"
    assert dead["guarantee"] == "AT LEAST ONCE"
    assert check_named(drain, "drain offsets")["status"] == "ok"
    assert "eo-local-pw" not in output
    assert topic not in kafka_topics(bootstrap) and pg_relations(pg_dsn, pg_schema) == []
