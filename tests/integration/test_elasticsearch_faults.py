"""Elasticsearch faults of issue 16, against the test server (lab/es_stand_in/),
through real Spark: a document too large for the server (HTTP 413) goes to the dead letters and
the rest of its batch is written; 429 and 5xx storms and refused connections (F7) strike at
seeded moments WHILE the batches are written, and every ``_id`` ends written exactly once
(write counts and ``_version`` per ``_id``), a failed batch being re-run by a new sink as
Spark's restart would.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from exactlyonce.connectors.elasticsearch import ElasticsearchSink, RetryPolicy
from exactlyonce.dedup.ids import record_id
from exactlyonce.integration.lab.es_stand_in import EsTestServer
from tests.crash.harness import crash_seed
from tests.support.es_fixtures import EsHandle
from tests.support.events import events, ids

pytestmark = pytest.mark.integration

FAST = RetryPolicy(max_retries=5, initial_backoff=0.05, max_backoff=0.4)


@pytest.fixture
def index(unique_name: str) -> str:
    return unique_name.replace("_", "-")


@pytest.fixture
def small_server() -> Iterator[EsTestServer]:
    """A server of its own that refuses requests over 16 KiB with 413, as
    ``http.max_content_length`` does."""
    with EsTestServer(max_content_length=16 * 1024) as server:
        yield server


def test_a_document_too_large_for_the_server_goes_to_the_dead_letters(
    spark: SparkSession, services: dict[str, str], small_server: EsTestServer, index: str
) -> None:
    big = {"e7", "e42", "e130"}
    df = events(spark, 0, 200).withColumn(
        "note",
        F.when(F.col("event_id").isin(*big), F.repeat(F.lit("x"), 40_000)).otherwise(F.lit("ok")),
    )
    sink = ElasticsearchSink(
        small_server.url, index, ["event_id"], query_name=index, shards=2, retry_policy=FAST
    )
    sink(df, 0)
    report = sink.last_report
    assert report is not None and report.dead_letters == 3 and report.written == 197, report
    letters = small_server.documents(f"{index}-dead-letters")
    assert sorted(d["record_id"] for d in letters.values()) == sorted(record_id([i]) for i in big)
    assert all(str(d["error"]).startswith("413") for d in letters.values())
    writes = small_server.write_counts(index)
    assert set(writes) == ids(0, 200) - {record_id([i]) for i in big}
    assert set(writes.values()) == {1}


FAULTS = ("429 items", "503 items", "500 items", "503 requests", "refused connections")


def inject(server: EsTestServer, fault: str, seconds: float) -> None:
    if fault == "refused connections":
        server.refuse_connections_for(seconds)
    elif fault == "503 requests":
        server.fail_requests_for(seconds, 503)
    else:
        server.reject_for(seconds, int(fault.split()[0]))


class Storms(threading.Thread):
    """Faults at seeded moments while the batches run: each fault in turn (seeded order and
    gaps) until :meth:`finish`; what struck is in ``struck``."""

    def __init__(self, server: EsTestServer, seed: int) -> None:
        super().__init__(daemon=True)
        self.server, self.rng = server, random.Random(seed)
        self.struck: list[str] = []
        self._done = threading.Event()

    def run(self) -> None:
        while not self._done.is_set():
            for fault in self.rng.sample(FAULTS, len(FAULTS)):
                if self._done.wait(self.rng.uniform(0.3, 1.0)):
                    return
                inject(self.server, fault, self.rng.uniform(0.3, 0.9))
                self.struck.append(fault)

    def finish(self) -> None:
        self._done.set()
        self.join(timeout=5)
        time.sleep(1.0)  # a refusal's listener comes back


def test_storms_and_refusals_while_the_batches_run_end_exactly_once(
    spark: SparkSession,
    services: dict[str, str],
    es: EsHandle,
    index: str,
) -> None:
    server = es.require_server("429/5xx storms and refused connections")
    seed = crash_seed("Elasticsearch fault schedule")
    storms = Storms(server, seed)
    restarts, epoch = 0, 0
    before = dict(server.rejected_by_status)
    before_failed = server.failed_requests

    def every_fault_met_a_write() -> bool:
        rejected = {s: n - before.get(s, 0) for s, n in server.rejected_by_status.items()}
        met = all(rejected.get(s, 0) > 0 for s in (429, 500, 503))
        return met and server.failed_requests > before_failed and server.refusals > 0

    storms.start()
    try:  # at least 4 batches, and on until every kind of fault met a write (at most 12)
        while epoch < 4 or (epoch < 12 and not every_fault_met_a_write()):
            batch = events(spark, max(0, epoch * 100 - 30), (epoch + 1) * 100)  # 30 replays
            for _attempt in range(20):
                try:
                    sink = new_sink(es, index)  # a restarted driver: Spark's retry of the query
                    sink(batch, epoch)
                    break
                except Exception:
                    restarts += 1
            else:
                pytest.fail(f"epoch {epoch} never committed in 20 attempts")
            epoch += 1
    finally:
        storms.finish()
    print(f"seed {seed}: {epoch} batches, faults {storms.struck}, {restarts} batch restarts")
    assert every_fault_met_a_write(), (server.rejected_by_status, storms.struck)
    writes = es.writes(index)
    doubled = {i: n for i, n in writes.items() if n > 1}
    assert not doubled, f"{len(doubled)} _ids written more than once"
    assert set(writes) == ids(0, epoch * 100), "missing or unexpected _ids"
    assert {v for vs in server.versions_written(index).values() for v in vs} == {1}


def new_sink(es: EsHandle, index: str, **kw: Any) -> ElasticsearchSink:
    return ElasticsearchSink(
        es.url, index, ["event_id"], query_name=index, shards=2, retry_policy=FAST, **kw
    )
