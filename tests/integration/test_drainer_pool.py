"""Several drainers over one buffer, each draining its own partitions (``member=(i, n)``):
as threads, as a :class:`~exactlyonce.buffer.pool.DrainerPool` of processes, and as
``exactlyonce drain --processes N``. Real Spark, the local broker and PostgreSQL; writes are
counted by tests/support/audit.py's triggers: committed insert attempts, those ON CONFLICT DO
NOTHING skips included, and rows inserted."""

from __future__ import annotations

import functools
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import psycopg
import pytest
from pyspark.sql import SparkSession

from exactlyonce.buffer import Buffered, Drainer, KafkaBuffer
from exactlyonce.buffer.pool import DrainerPool
from exactlyonce.connectors.kafka.reader import load_commits
from exactlyonce.connectors.postgres import PostgresSink
from exactlyonce.errors import ConfigError
from exactlyonce.integration.cli import parse_member
from tests.integration.test_buffer import events, ids, prepared, stored_offsets
from tests.support.audit import assert_exactly_once, write_counts
from tests.support.pipelines import buffered_pipeline

pytestmark = pytest.mark.integration

PARTITIONS = 4
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def bootstrap(services: dict[str, str]) -> str:
    return services["KAFKA_BOOTSTRAP_SERVERS"]


def make_pipeline(pg_dsn: str, bootstrap: str, redis_url: str, name: str) -> tuple[Any, Any]:
    """Module-level, so a DrainerPool can build it in each of its processes."""
    sink = PostgresSink(pg_dsn, name, ["event_id"], name, redis_url=redis_url)
    return sink, KafkaBuffer(topic=name, bootstrap_servers=bootstrap, partitions=PARTITIONS)


def filled(
    spark: SparkSession,
    pg: psycopg.Connection[Any],
    services: dict[str, str],
    name: str,
) -> tuple[PostgresSink, KafkaBuffer]:
    """A buffer holding 3 epochs (1,000 IDs, 100 repeated across epochs), nothing drained."""
    sink, buffer = make_pipeline(
        services["EXACTLYONCE_PG_DSN"],
        services["KAFKA_BOOTSTRAP_SERVERS"],
        services["EXACTLYONCE_REDIS_URL"],
        name,
    )
    buffered = Buffered(sink, buffer)
    prepared(pg, buffered, spark, name)
    buffered(events(spark, 0, 400), 0)
    buffered(events(spark, 300, 800), 1)
    buffered(events(spark, 800, 1000), 2)
    return sink, buffer


def check_drained(pg: psycopg.Connection[Any], bootstrap: str, name: str) -> None:
    assert_exactly_once(pg, name, ids(0, 1000))
    assert set(write_counts(pg, name).values()) == {1}, "a record was written twice"
    frontier = load_commits(bootstrap, name, topic=name).frontier(name)
    stored = stored_offsets(pg, name)
    assert {p: stored.get(p, 0) for p in frontier} == frontier, "offsets end at the frontier"


def test_members_as_threads_each_drain_their_partitions_once(
    spark: SparkSession, pg: psycopg.Connection[Any], services: dict[str, str], unique_name: str
) -> None:
    sink, buffer = filled(spark, pg, services, unique_name)
    members = [Drainer(sink, buffer, batch_size=150, member=(i, 2)) for i in range(2)]
    reports: list[Any] = [None, None]

    def drain(i: int) -> None:
        reports[i] = members[i].drain_available(timeout_s=120)

    threads = [threading.Thread(target=drain, args=(i,)) for i in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(180)
    try:
        assert all(r is not None for r in reports), "a member failed"
        assert all(r.written > 0 for r in reports), "both members wrote their share"
        assert sum(r.written for r in reports) == 1000
        for i, member in enumerate(members):
            assert set(member.positions or {}) <= {p for p in range(PARTITIONS) if p % 2 == i}
            assert member.lag.records == 0
    finally:
        for member in members:
            member.close()
    check_drained(pg, services["KAFKA_BOOTSTRAP_SERVERS"], unique_name)


def test_a_pool_of_processes_drains_once(
    spark: SparkSession, pg: psycopg.Connection[Any], services: dict[str, str], unique_name: str
) -> None:
    filled(spark, pg, services, unique_name)
    factory = functools.partial(
        make_pipeline,
        services["EXACTLYONCE_PG_DSN"],
        services["KAFKA_BOOTSTRAP_SERVERS"],
        services["EXACTLYONCE_REDIS_URL"],
        unique_name,
    )
    with DrainerPool(factory, processes=2, batch_size=150) as pool:
        report = pool.drain_available(timeout_s=120)
        assert report.written == 1000 and report.dead_letters == 0
        assert pool.drain_available(timeout_s=60).written == 0, "caught up: nothing again"
    check_drained(pg, services["KAFKA_BOOTSTRAP_SERVERS"], unique_name)


def test_a_pool_reports_a_bad_member_config_by_its_field(services: dict[str, str]) -> None:
    with pytest.raises(ConfigError, match="batch_size"):
        DrainerPool(
            functools.partial(
                make_pipeline,
                services["EXACTLYONCE_PG_DSN"],
                services["KAFKA_BOOTSTRAP_SERVERS"],
                services["EXACTLYONCE_REDIS_URL"],
                "t_never_used",
            ),
            processes=2,
            batch_size=0,
        )


def test_drain_command_with_processes(
    spark: SparkSession,
    pg: psycopg.Connection[Any],
    services: dict[str, str],
    tmp_path: Path,
    unique_name: str,
) -> None:
    filled(spark, pg, services, unique_name)
    config = tmp_path / "pipeline.yaml"
    config.write_text(
        buffered_pipeline(
            unique_name, tmp_path, schema="event_id STRING", partitions=PARTITIONS, batch_size=150
        )
    )
    done = subprocess.run(
        [sys.executable, "-m", "exactlyonce", "drain", str(config), "--processes", "2"]
        + ["--until-idle", "2"],
        env={**os.environ, **services, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "partitions p % 2 == 0" in done.stdout and "partitions p % 2 == 1" in done.stdout
    check_drained(pg, services["KAFKA_BOOTSTRAP_SERVERS"], unique_name)


@pytest.mark.parametrize("text", ["2/2", "x/2", "1", "-1/2"])
def test_member_must_be_i_of_n(text: str) -> None:
    with pytest.raises(ConfigError, match="--member"):
        parse_member(text)
