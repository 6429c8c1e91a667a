"""The synthetic events the integration tests write, and the record IDs they must end up as.

Event ``n`` is ``{"event_id": "e<n>", "amount": 10 * n, "action": "click"}``; its record ID
is ``record_id(["e<n>"])``.
"""

from __future__ import annotations

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from exactlyonce.dedup.ids import record_id

# The Spark query id the batch DataFrames of the test thread carry (the ``spark`` fixture
# sets it), as a streaming query's batches carry theirs: pass it to ``run_epoch`` too.
BATCH_QUERY_ID = "tests-batch-query"


def events(spark: SparkSession, start: int, end: int) -> DataFrame:
    """Events ``start`` to ``end - 1`` as a Spark DataFrame."""
    return spark.range(start, end).select(
        F.concat(F.lit("e"), F.col("id").cast("string")).alias("event_id"),
        (F.col("id") * 10).alias("amount"),
        F.lit("click").alias("action"),
    )


def ids(start: int, end: int) -> set[str]:
    """The record IDs of events ``start`` to ``end - 1``."""
    return {record_id([f"e{i}"]) for i in range(start, end)}
