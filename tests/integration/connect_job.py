"""A Spark Connect client (``SparkSession.builder.remote("local[1]")``: a local Spark
Connect server started for it, on Spark's port 15002, so one such job at a time) writing JSON
files into PostgreSQL through each API (``foreachBatch``: the sink pickled to the server;
``format``: ``format("exactlyonce")``), run by tests/integration/test_spark_connect.py. Per
API, into table ``<table>_<api>`` from ``<work>/<api>/``, three queries, each
``availableNow`` over the files there are when it starts:

1. ``first``: the files ``part-0*`` into a fresh table, from checkpoint ``A``;
2. ``restart``: more files, the same checkpoint ``A`` (a restart of the query);
3. ``reset``: checkpoint ``B`` (a deleted checkpoint, as Spark sees it): must be refused.

Prints one JSON line per query: ``{"api": ..., "query": ..., "ok": bool, "error": ...}``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
from pathlib import Path
from typing import Any

from tests.support.secrets_scan import event_log_conf

SCHEMA = "event_id STRING, n BIGINT"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--work", required=True)
    parser.add_argument("--table", required=True)
    args = parser.parse_args()
    os.environ["PYSPARK_PYTHON"] = sys.executable  # the server's Python workers: this venv
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.remote("local[1]").config("spark.sql.shuffle.partitions", "2")
    for key, value in event_log_conf(Path(args.work) / "eventlog").items():
        builder = builder.config(key, value)  # scanned for credentials by the test
    spark = builder.getOrCreate()
    from exactlyonce.integration.spark import register_data_source

    register_data_source(spark)
    for api in ("foreachBatch", "format"):
        work = Path(args.work) / api
        for query, files, checkpoint in (
            ("first", "part-0", "A"),
            ("restart", "part-1", "A"),
            ("reset", "", "B"),
        ):
            for path in sorted((work / "staged").glob(f"{files}*.json") if files else []):
                shutil.move(str(path), work / "input" / path.name)
            table = f"{args.table}_{api.lower()}"
            result = run(spark, api, work, table, work / checkpoint)
            print(json.dumps({"api": api, "query": query, **result}), flush=True)
    spark.stop()


def run(spark: Any, api: str, work: Path, table: str, checkpoint: Path) -> dict[str, Any]:
    df = spark.readStream.schema(SCHEMA).json(str(work / "input"))
    writer = df.writeStream.queryName(table).option("checkpointLocation", str(checkpoint))
    if api == "foreachBatch":
        from exactlyonce.connectors import PostgresSink

        sink = PostgresSink(
            os.environ["EXACTLYONCE_PG_DSN"],
            table,
            ["event_id"],
            table,
            mode="append",
            shards=2,
        )
        writer = writer.foreachBatch(sink)
    else:
        writer = writer.format("exactlyonce")
        options = {
            "sink": "postgres",
            "dsn": "${EXACTLYONCE_PG_DSN}",  # read on the server: Connect logs the plan
            "table": table,
            "id_columns": "event_id",
            "query_name": table,
        }
        for name, value in options.items():
            writer = writer.option(name, value)
    try:
        writer.trigger(availableNow=True).start().awaitTermination()
    except Exception as exc:  # the refusal arrives as the query's exception
        # whole: its traceback comes first and grows with the checkout's path, so a cut
        # message can end before the exception's name (it did, from a clone in /tmp/tmp.*)
        return {"ok": False, "error": str(exc)}
    return {"ok": True, "error": None}


if __name__ == "__main__":
    main()
