"""Record IDs computed by Spark equal the Python reference, for one and several key columns."""

from __future__ import annotations

import pytest
from pyspark.sql import SparkSession

from exactlyonce.dedup.ids import RecordIdSpec, record_id

pytestmark = pytest.mark.integration

ROWS = [
    ("a", 1),
    ("é ü 中", 2),
    ('quote " and \\ backslash', 3),
    ("", 0),
    ("a,1", 10),  # the JSON array keeps ("a,1", 10) apart from ("a", "1,10")-like splits
    (None, 4),
]


@pytest.mark.parametrize("columns", [["name"], ["n"], ["name", "n"], ["n", "name"]])
def test_spark_ids_match_the_python_reference(spark: SparkSession, columns: list[str]) -> None:
    df = spark.createDataFrame(ROWS, "name STRING, n BIGINT")
    got = df.select(*columns, RecordIdSpec.from_columns(columns).column().alias("rid")).collect()
    for row in got:
        values = [row[c] for c in columns]
        if any(v is None for v in values):
            assert row["rid"] is None, "a null key column gives no ID"
        else:
            assert row["rid"] == record_id(values), values


def test_ids_of_different_keys_differ() -> None:
    keys = [[r[0], r[1]] for r in ROWS if r[0] is not None]
    assert len({record_id(k) for k in keys}) == len(keys)
    assert record_id(["a"]) != record_id(["a", "b"])
