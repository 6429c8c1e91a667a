"""F5 of issue 16: forced Bloom false positives, asserted to happen and to drop nothing.

A Bloom filter far too small for what it holds (64 IDs of capacity at fp_rate 0.3 per shard,
holding hundreds) answers "maybe" for most new IDs. Invariant 2: a "maybe" is only a hint,
confirmed in the catalog; a new record is never dropped on a Bloom hit alone. The sink is a
PostgreSQL ``mode="append"`` table (no unique key: a wrongly dropped record would be missing,
a wrongly kept replay a duplicate) written by real Spark, audited by an insert trigger.
"""

from __future__ import annotations

from typing import Any

import psycopg
import pytest
from pyspark.sql import SparkSession

from exactlyonce.connectors import PostgresSink
from tests.support.audit import assert_exactly_once, install_audit
from tests.support.events import events, ids

pytestmark = pytest.mark.integration


def test_forced_false_positives_happen_and_drop_no_new_record(
    spark: SparkSession, pg_dsn: str, pg: psycopg.Connection[Any], unique_name: str
) -> None:
    def sink() -> PostgresSink:  # a new driver each epoch: filters loaded from Redis
        return PostgresSink(
            pg_dsn,
            unique_name,
            ["event_id"],
            query_name=unique_name,
            mode="append",
            shards=2,
            dedup={"expected_ids": 64, "fp_rate": 0.3},
        )

    first = sink()
    first.preflight(events(spark, 0, 1).schema)
    install_audit(pg, unique_name)
    first(events(spark, 0, 600), 0)
    second = sink()
    second(events(spark, 500, 1100), 1)  # 100 replays, 500 new
    report = second.last_report
    assert report is not None
    print(
        f"bloom: {report.bloom_negatives} negatives, {report.bloom_false_positives} false "
        f"positives, {report.catalog_lookups} lookups, {report.duplicates} duplicates"
    )
    assert report.bloom_false_positives > 0, "the tiny filter was meant to answer 'maybe'"
    assert report.bloom_false_positives >= 250, "most of the 500 new IDs should be 'maybe'"
    assert report.written == 500 and report.duplicates == 100
    assert report.catalog_lookups == report.bloom_false_positives + 100
    assert_exactly_once(pg, unique_name, ids(0, 1100))
