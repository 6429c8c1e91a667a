"""A Spark Connect client (``remote("local[2]")``) running a Kafka topic into PostgreSQL in
Spark Real-time Mode through ``start_stream(..., real_time=...)`` (the Arrow transport), until
``--events`` distinct events are in the table; run by tests/integration/test_realtime_connect.py.
Prints the session's transport settings and ``JOB DONE arrow`` when the query stopped."""

from __future__ import annotations

import argparse
import os
import sys
import time

import psycopg
from psycopg import sql


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--topic", required=True)
    parser.add_argument("--table", required=True)
    parser.add_argument("--checkpoint", required=True)
    parser.add_argument("--events", type=int, required=True)
    args = parser.parse_args()
    os.environ["PYSPARK_PYTHON"] = sys.executable  # the server's Python workers: this venv
    from exactlyonce.connectors import PostgresSink
    from exactlyonce.integration.spark import session, start_stream
    from tests.support.realtime import event_stream

    spark = session("rtm-connect", remote="local[2]", data_source=False)
    stream = event_stream(spark, os.environ["KAFKA_BOOTSTRAP_SERVERS"], args.topic)
    dsn = os.environ["EXACTLYONCE_PG_DSN"]
    sink = PostgresSink(dsn, args.table, None, args.table, id_from="content", mode="append")
    query = start_stream(stream, sink, args.checkpoint, real_time="5 seconds")
    count = sql.SQL("SELECT count(DISTINCT event_id) FROM {}").format(sql.Identifier(args.table))
    deadline = time.monotonic() + 240
    with psycopg.connect(dsn, autocommit=True) as conn:
        while True:
            if query.exception() is not None:
                raise SystemExit(f"query failed: {query.exception()}")
            try:
                row = conn.execute(count).fetchone()
            except psycopg.errors.UndefinedTable:
                row = (0,)
            if row and row[0] >= args.events:
                break
            if time.monotonic() > deadline:
                raise SystemExit(f"only {row} of {args.events} events in 240 s")
            time.sleep(0.5)
    query.stop()
    conf = spark.conf
    # the Arrow transport's traces in the client's session: the allowlist check off (Spark
    # reads it every epoch), the batch size given back once the query held its copy
    print(f"allowlistCheck={conf.get('spark.sql.streaming.realTimeMode.allowlistCheck')}")
    print(f"maxRecordsPerBatch={conf.get('spark.sql.execution.arrow.maxRecordsPerBatch')}")
    print("JOB DONE arrow", flush=True)
    spark.stop()


if __name__ == "__main__":
    main()
