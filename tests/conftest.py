"""Shared fixtures. Real-service tests FAIL (never skip) when a service is missing.

`make test` starts the services first (`make services`); a user who points the tests at docker
compose or a real cluster sets EXACTLYONCE_PG_DSN / EXACTLYONCE_REDIS_URL /
KAFKA_BOOTSTRAP_SERVERS instead.
"""

from __future__ import annotations

import os
import sys
import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

# The fixture modules of tests/support/, loaded as plugins (as psycopg's tests do): their
# fixtures are everywhere without an import in each test module.
pytest_plugins = [
    "tests.support.es_fixtures",  # es, es_backend: Elasticsearch (real, or the stand-in)
    "tests.support.redis_fixtures",  # sink_redis: the Redis sink's own redis-server
    "tests.support.redis_cluster",  # redis_cluster: a local Redis Cluster for the catalog
    "tests.support.opensearch_node",  # opensearch: a genuine OpenSearch node
    "tests.support.kafka_cluster",  # kafka_cluster: a 3-node Apache Kafka cluster (KRaft)
]

# One marker per sink (registered in pyproject.toml), put on every test of a file whose name
# says the sink: `pytest -m redis`, `pytest -m "not elasticsearch"`. A test file of the
# stand-in (es_*) counts as Elasticsearch's, the Kafka broker's (broker_*) as Kafka's. A file
# whose cells write several sinks marks each cell with its own sink (pytest.param's marks).
SINK_MARKERS: dict[str, tuple[str, ...]] = {
    "postgres": ("postgres",),
    "kafka": ("kafka", "broker", "tansu"),
    "redis": ("redis",),
    "elasticsearch": ("elasticsearch", "test_es_"),
    "opensearch": ("opensearch",),
}

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)

# Every JVM the tests start compiles with C1 only: the in-process Spark driver, the crash
# jobs', the CLI's and the examples' drivers, standalone masters, workers and executors,
# private brokers. A short-lived JVM on test-sized data spends more CPU in the C2 compiler
# than C2's code gives back (Spark session + one job: 14.6 -> 8.4 CPU-s; the Kafka source
# CLI tests: 125 -> 80 CPU-s, measured on 2 cores). Set before any JVM starts; every
# subprocess inherits it. Each JVM notes it on stderr ("Picked up JAVA_TOOL_OPTIONS").
C1_ONLY = "-XX:TieredStopAtLevel=1"
if C1_ONLY not in os.environ.get("JAVA_TOOL_OPTIONS", ""):
    os.environ["JAVA_TOOL_OPTIONS"] = f"{os.environ.get('JAVA_TOOL_OPTIONS', '')} {C1_ONLY}".strip()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """A failing test's crash seeds go into its report (a section), to replay it with."""
    outcome = yield
    report = outcome.get_result()  # type: ignore[attr-defined]
    if report.failed:
        from tests.crash.harness import SEEDS

        seeds = SEEDS.get(item.nodeid)
        if seeds:
            report.sections.append(("crash seeds", "\n".join(seeds)))


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Each test gets its file's sink markers (:data:`SINK_MARKERS`); then the longest tests
    first (their seconds from tests/support/slow_tests.py; a crash test not listed
    counts a minute, any other nothing): xdist hands each worker a block of the list and a
    worker that runs out takes the tail of the other's, so a run ends on short tests instead
    of one worker finishing a long crash test while the other idles. The sort is stable and
    the same in every worker, as xdist requires."""
    from tests.support.slow_tests import SECONDS

    def seconds(item: pytest.Item) -> int:
        default = 60 if item.get_closest_marker("crash") else 0
        return SECONDS.get(item.nodeid, default)

    for item in items:
        for marker in sink_markers(item.path.name):
            item.add_marker(marker)
    items.sort(key=seconds, reverse=True)


def sink_markers(file_name: str) -> list[str]:
    """The sink markers of a test file, from its name (``test_upsert_redis.py``: redis)."""
    return [m for m, words in SINK_MARKERS.items() if any(w in file_name for w in words)]


@pytest.fixture(autouse=True)
def fresh_python_worker() -> Iterator[None]:
    """Each test starts as a fresh Python worker would: no Real-time Mode store kept from
    another test's epochs (tests that drive writers in this process)."""
    from exactlyonce.connectors.base.realtime import close_parked

    close_parked()
    yield
    close_parked()


@pytest.fixture(scope="session")
def services() -> dict[str, str]:
    from exactlyonce.integration.envfile import service_env

    try:
        env = service_env()
    except RuntimeError as exc:
        pytest.fail(f"real services are required and not running: {exc}. Run `make services`.")
    os.environ.update(env)  # sinks and subprocess jobs find the catalog's Redis here
    return env


@pytest.fixture(scope="session")
def pg_dsn(services: dict[str, str]) -> str:
    dsn = services["EXACTLYONCE_PG_DSN"]
    try:
        with psycopg.connect(dsn, connect_timeout=5) as conn:
            conn.execute("SELECT 1")
    except psycopg.OperationalError as exc:
        pytest.fail(f"PostgreSQL from services.env does not answer: {exc}. Run `make services`.")
    return dsn


@pytest.fixture(scope="session")
def bootstrap(services: dict[str, str]) -> str:
    """The Kafka broker's bootstrap servers: genuine Apache Kafka (``make services``), or
    the broker ``KAFKA_BOOTSTRAP_SERVERS`` names."""
    return services["KAFKA_BOOTSTRAP_SERVERS"]


@pytest.fixture(scope="session")
def tansu_bootstrap(services: dict[str, str]) -> str:
    """Tansu, a Kafka-protocol broker that delivers aborted records to read_committed readers
    and never times out a transaction: started here (it is not in ``make services``), for
    the tests that keep the consumption recipe for such brokers honest."""
    from exactlyonce.integration.lab.services import start_service
    from exactlyonce.integration.lab.services.tansu import bootstrap as tansu

    try:
        start_service("tansu")
    except RuntimeError as exc:
        pytest.fail(f"Tansu did not start: {exc}")
    return tansu()


@pytest.fixture
def pg(pg_dsn: str) -> Iterator[psycopg.Connection[Any]]:
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        yield conn


@pytest.fixture
def unique_name(request: pytest.FixtureRequest) -> str:
    """A fresh name per test, for tables, queries and topics (bytewax's tmp_topic idea)."""
    base = "".join(ch if ch.isalnum() else "_" for ch in request.node.name.lower())[:30]
    return f"t_{base}_{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    from exactlyonce.connectors.base.sink import QUERY_ID_PROPERTY
    from exactlyonce.integration.spark import session
    from tests.crash.job_common import TEST_JVM
    from tests.support.events import BATCH_QUERY_ID

    spark = session("exactlyonce-tests", master="local[2]", extra=TEST_JVM)
    # The batch DataFrames a test hands a sink itself (``sink(df, epoch)``) stand for the
    # batches of one streaming query, so they carry a Spark query id as its thread would: a
    # new sink of the same query_name is then a restart from the same checkpoint. Without
    # one, the guard refuses a head with committed epochs (tests/unit/test_checkpoint_guard.py).
    # Streaming queries set their own id in their own thread.
    spark.sparkContext.setLocalProperty(QUERY_ID_PROPERTY, BATCH_QUERY_ID)
    yield spark
    spark.stop()
