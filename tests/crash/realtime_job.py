"""A Spark Real-time Mode job: a Kafka topic -> ``foreach(writer)`` into a PostgreSQL table
(``--sink postgres``), another Kafka topic (``--sink kafka``; ``--table`` names it) or a Redis
stream (``--sink redis``: the key ``<table>:events`` in the Redis ``SINK_REDIS_URL`` names) or
an OpenSearch index (``--sink opensearch``: ``<table>`` on the node ``OPENSEARCH_URL`` names).

``--writer frontier``: the sink's ``realtime()`` writer (exactly once by source frontiers), fed
by ``foreach`` or (``--transport arrow``) by ``mapInArrow`` (exactlyonce.integration.spark.
start_realtime);
``--writer plain``: the negative control, a foreach writer that INSERTs each row in its own
transaction, produces it with an idempotent, non-transactional producer, XADDs it, or indexes
it with an ID the engine picks (es-hadoop's default without ``es.mapping.id``), with no
frontier (at-least-once, as users write it by hand).

Runs until the file ``<checkpoint>.stop`` appears, then stops the query and exits 0. Each
row holds the source coordinates and the event's ``event_id``.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql
from pyspark.sql import functions as F

from exactlyonce.connectors import KafkaSink, PostgresSink, RedisSink
from exactlyonce.connectors.opensearch import OpenSearchSink
from exactlyonce.integration.spark import start_realtime
from tests.crash import job_common
from tests.support.realtime import event_stream


class PlainInsertWriter:
    """The negative control: every row INSERTed and committed at once; a re-run epoch writes
    its rows again."""

    def __init__(self, dsn: str, table: str) -> None:
        self.dsn, self.table = dsn, table

    def open(self, partition_id: int, epoch_id: int) -> bool:
        self.epoch = epoch_id
        self.conn = psycopg.connect(self.dsn, autocommit=True)
        return True

    def process(self, row: Any) -> None:
        self.conn.execute(
            sql.SQL(
                'INSERT INTO {} (topic, partition, "offset", event_id, record_id, epoch) '
                "VALUES (%s, %s, %s, %s, md5(%s)::uuid, %s)"
            ).format(sql.Identifier(self.table)),
            [
                row.topic,
                row.partition,
                row.offset,
                row.event_id,
                f"{row.topic}|{row.partition}|{row.offset}",
                self.epoch,
            ],
        )

    def close(self, error: BaseException | None) -> None:
        self.conn.close()


class PlainProduceWriter:
    """The negative control for Kafka: every row produced at once (idempotent producer, no
    transaction), flushed at the epoch's end; a re-run epoch produces its rows again."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.bootstrap, self.topic = bootstrap, topic

    def open(self, partition_id: int, epoch_id: int) -> bool:
        # Imported here: cloudpickle ships this class by value, and a C type among its
        # globals failed to unpickle in the worker ("type object 'Producer' has no
        # attribute '__bool__'").
        from confluent_kafka import Producer

        self.producer = Producer(
            {"bootstrap.servers": self.bootstrap, "enable.idempotence": True, "linger.ms": 5}
        )
        return True

    def process(self, row: Any) -> None:
        value = {"topic": row.topic, "partition": row.partition, "offset": row.offset}
        self.producer.produce(self.topic, json.dumps({**value, "event_id": row.event_id}))
        self.producer.poll(0)

    def close(self, error: BaseException | None) -> None:
        self.producer.flush(30)


class PlainXaddWriter:
    """The negative control for Redis: every row XADDed at once; a re-run epoch adds its rows
    again."""

    def __init__(self, url: str, key: str) -> None:
        self.url, self.key = url, key

    def open(self, partition_id: int, epoch_id: int) -> bool:
        import redis

        self.r = redis.Redis.from_url(self.url)
        return True

    def process(self, row: Any) -> None:
        self.r.xadd(self.key, {"event_id": row.event_id, "offset": row.offset})

    def close(self, error: BaseException | None) -> None:
        self.r.close()


class PlainIndexWriter:
    """The negative control for OpenSearch: every row indexed at once, the engine picking its
    ``_id``; a re-run epoch indexes its rows again, as new documents."""

    def __init__(self, url: str, index: str) -> None:
        self.url, self.index = url, index

    def open(self, partition_id: int, epoch_id: int) -> bool:
        return True

    def process(self, row: Any) -> None:
        import urllib.request

        body = json.dumps({"event_id": row.event_id, "offset": row.offset}).encode()
        request = urllib.request.Request(
            f"{self.url}/{self.index}/_doc", data=body, method="POST",
            headers={"Content-Type": "application/json"},
        )  # fmt: skip
        with urllib.request.urlopen(request, timeout=30) as answer:
            answer.read()

    def close(self, error: BaseException | None) -> None:
        pass


def frontier_writer(args: argparse.Namespace, schema: Any) -> Any:
    """The sink's Real-time Mode writer for this job's stream."""
    per_record = "many" if args.explode else "one"
    if args.sink == "kafka":
        bootstrap = os.environ["KAFKA_BOOTSTRAP_SERVERS"]
        kafka = KafkaSink(bootstrap, args.table, None, args.query_name, id_from="content")
        return kafka.realtime(schema, rows_per_source_record=per_record)
    if args.sink == "opensearch":
        search = OpenSearchSink(os.environ["OPENSEARCH_URL"], args.table, None,
                                query_name=args.query_name, id_from="content")  # fmt: skip
        return search.realtime(schema, rows_per_source_record=per_record)
    if args.sink == "redis":
        url = os.environ["SINK_REDIS_URL"]
        redis_sink = RedisSink(url, f"{args.table}:events", None, args.query_name, write="stream",
                               id_from="content")  # fmt: skip
        return redis_sink.realtime(schema, rows_per_source_record=per_record)
    dsn = os.environ["EXACTLYONCE_PG_DSN"]
    sink = PostgresSink(dsn, args.table, None, args.query_name, id_from="content", mode="append")
    return sink.realtime(schema, rows_per_source_record=per_record)


def plain_writer(args: argparse.Namespace) -> Any:
    if args.sink == "kafka":
        return PlainProduceWriter(os.environ["KAFKA_BOOTSTRAP_SERVERS"], args.table)
    if args.sink == "opensearch":
        return PlainIndexWriter(os.environ["OPENSEARCH_URL"], args.table)
    if args.sink == "redis":
        return PlainXaddWriter(os.environ["SINK_REDIS_URL"], f"{args.table}:events")
    return PlainInsertWriter(os.environ["EXACTLYONCE_PG_DSN"], args.table)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--input", help="unused (the harness passes it)")
    parser.add_argument("--checkpoint", required=True)
    parser.add_argument("--query-name", required=True)
    parser.add_argument("--master", default="local[4]")
    parser.add_argument("--table", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--writer", default="frontier", choices=["frontier", "plain"])
    parser.add_argument(
        "--sink", default="postgres", choices=["postgres", "kafka", "redis", "opensearch"]
    )
    parser.add_argument("--transport", default="foreach", choices=["foreach", "arrow"])
    parser.add_argument("--starting-offsets", default="earliest")
    parser.add_argument("--drop", default="", help="a source column to leave out")
    parser.add_argument("--explode", type=int, default=0, help="rows per source record")
    args = parser.parse_args()
    # Spark hands a Python foreach writer its rows through a 64 KiB buffer: rows would reach
    # process() only when it fills (or at the epoch's end) at this test's rates.
    spark = job_common.crash_session(
        "rtm-job", args.master, {"spark.buffer.size": "1"}, connectors=True
    )
    bootstrap = os.environ["KAFKA_BOOTSTRAP_SERVERS"]
    stream = event_stream(spark, bootstrap, args.topic, args.starting_offsets)
    if args.drop:
        stream = stream.drop(args.drop)
    if args.explode:
        stream = stream.withColumn("n", F.explode(F.sequence(F.lit(1), F.lit(args.explode))))
    if args.writer == "frontier":
        writer = frontier_writer(args, stream.schema)
    else:
        writer = plain_writer(args)
    query = start_realtime(
        stream, writer, args.checkpoint, args.query_name, "5 seconds", args.transport
    )
    print("JOB STARTED", flush=True)
    stop = Path(f"{args.checkpoint}.stop")
    while not stop.exists():
        if query.exception() is not None:
            raise SystemExit(f"query failed: {query.exception()}")
        time.sleep(0.2)
    query.stop()
    print(f"JOB DONE {len(query.recentProgress)} epochs", flush=True)
    spark.stop()


if __name__ == "__main__":
    main()
