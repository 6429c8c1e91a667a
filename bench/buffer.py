"""The Kafka buffer ahead of a slow sink: Spark batch durations, and drain throughput.

PostgreSQL's figures (:func:`run`) are part of ``python -m bench kafka`` (so
``bench/results/kafka.json`` comes from one run). ``python -m bench.buffer`` runs them beside
Redis's and Elasticsearch's (:mod:`bench.buffer_sinks`: the same figures, the sink slowed by a
latency proxy), prints each sink's two ratios and writes ``bench/results/buffer.json``
(``summary``: the ratios per sink; ``sinks``: every figure). For PostgreSQL: In one Spark session
(``local[2]``), with generated rows ``(id string(32), value bigint, note string)``:

Batch durations (``foreachBatch`` calls, one micro-batch of ``--batch-rows`` each, the first
of each path untimed):

``fast``
    ``PostgresSink`` (defaults: Redis catalog on, sorted COPY) into a plain table.
``slow_unbuffered``
    the same sink into a table whose statement trigger sleeps (``pg_sleep``) once per
    transaction, ``slow_factor - 1`` times the fast path's median batch, so a batch takes
    about ``slow_factor`` (10) times as long.
``slow_buffered``
    ``Buffered(PostgresSink(slow table), KafkaBuffer(...))``: the batch goes to the buffer
    topic; a :class:`~exactlyonce.buffer.Drainer` thread drains into the slow table at the
    same time, in the same process (it competes for the same two cores).

Keys: ``fast_batch_p50_s``/``_p99_s``, ``slow_unbuffered_batch_p50_s``/``_p99_s``,
``slow_buffered_batch_p50_s``/``_p99_s`` and ``buffered_vs_fast_p99`` (target <= 1.2).

Throughput (``--drain-rows``, best of ``--drain-repeat``, interleaved): ``direct_rows_per_s``
is ``PostgresSink`` writing the rows as one batch into a fresh fast table; ``drain_rows_per_s``
is a fresh :class:`~exactlyonce.buffer.Drainer` moving the same rows, already committed to a
buffer topic, into a fresh fast table (``drain_available``, from its start to caught up), set
up as ``exactlyonce drain`` runs it (``switch_interval_s=DRAIN_PROCESS_SWITCH_INTERVAL_S``).
``drain_vs_direct`` (target >= 0.8). ``drain_pool_rows_per_s``/``drain_pool_vs_direct``: the
same with a :class:`~exactlyonce.buffer.pool.DrainerPool` of ``--drain-processes`` processes
(started before the clock, as a running drainer service is), each draining its partitions.
Every table must end with exactly the rows written.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import statistics
import sys
import time
import uuid
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from bench.batch_timing import timed_batches
from bench.common import progress, ratio, service

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

SLOW_FACTOR = 10.0
TARGET_BUFFERED_VS_FAST_P99 = 1.2
TARGET_DRAIN_VS_DIRECT = 0.8


def _pg(dsn: str) -> Any:
    import psycopg

    return psycopg.connect(dsn, autocommit=True)


def count_rows(dsn: str, table: str) -> int:
    from psycopg import sql

    with _pg(dsn) as conn:
        row = conn.execute(sql.SQL("SELECT count(*) FROM {}").format(sql.Identifier(table)))
        return int(row.fetchone()[0])


def slow_down(dsn: str, table: str, seconds: float) -> None:
    """A statement trigger that sleeps ``seconds`` once per transaction writing ``table``."""
    from psycopg import sql

    fn = sql.Identifier(f"{table}_slow_fn")
    with _pg(dsn) as conn:
        conn.execute(
            sql.SQL(
                "CREATE OR REPLACE FUNCTION {fn}() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
                "IF current_setting('eo_bench.slept', true) IS DISTINCT FROM "
                "txid_current()::text THEN "
                "PERFORM set_config('eo_bench.slept', txid_current()::text, true); "
                "PERFORM pg_sleep({s}); END IF; RETURN NULL; END $$"
            ).format(fn=fn, s=sql.Literal(round(seconds, 3)))
        )
        conn.execute(
            sql.SQL(
                "CREATE TRIGGER {} AFTER INSERT ON {} FOR EACH STATEMENT EXECUTE FUNCTION {}()"
            ).format(sql.Identifier(f"{table}_slow_trg"), sql.Identifier(table), fn)
        )


def drop(dsn: str, tables: Sequence[str], queries: Sequence[str]) -> None:
    from psycopg import sql

    with _pg(dsn) as conn:
        for table in tables:
            conn.execute(sql.SQL("DROP TABLE IF EXISTS {} CASCADE").format(sql.Identifier(table)))
            conn.execute(
                sql.SQL("DROP FUNCTION IF EXISTS {}()").format(sql.Identifier(f"{table}_slow_fn"))
            )
        for name in ("exactlyonce_heads", "exactlyonce_shard_commits", "exactlyonce_drain_offsets"):
            conn.execute(
                sql.SQL("DELETE FROM {} WHERE query_name = ANY(%s)").format(sql.Identifier(name)),
                [list(queries)],
            )


def pipeline(dsn: str, table: str, bootstrap: str, redis_url: str) -> tuple[Any, Any]:
    """The drain benchmark's sink and buffer; module-level, so each process of a
    DrainerPool builds its own."""
    from exactlyonce.buffer import KafkaBuffer
    from exactlyonce.connectors.postgres import PostgresSink

    sink = PostgresSink(dsn, table, ["id"], table, shards=2, redis_url=redis_url)
    return sink, KafkaBuffer(topic=table, bootstrap_servers=bootstrap, partitions=2)


def run(
    spark: SparkSession,
    generate: Callable[[SparkSession, int, int], DataFrame],
    *,
    dsn: str,
    bootstrap: str,
    batch_rows: int = 20_000,
    batches: int = 11,
    drain_rows: int = 200_000,
    drain_repeat: int = 3,
    drain_processes: int = 2,
    first_id: int = 10_000_000,
) -> dict[str, Any]:
    """Every figure of this benchmark, from one run. ``generate(spark, n, start)`` gives N
    cached rows with IDs from ``start``."""
    from exactlyonce.buffer import Buffered, Drainer, KafkaBuffer
    from exactlyonce.buffer.drain.drainer import DRAIN_PROCESS_SWITCH_INTERVAL_S
    from exactlyonce.buffer.pool import DrainerPool
    from exactlyonce.connectors.postgres import PostgresSink

    tag = uuid.uuid4().hex[:8]
    tables: list[str] = []
    queries: list[str] = []

    def name(kind: str) -> str:
        value = f"bench_buf_{kind}_{tag}"
        tables.append(value)
        queries.append(value)
        return value

    def pg_sink(table: str) -> PostgresSink:
        return PostgresSink(dsn, table, ["id"], table, shards=2)

    start = first_id

    def rows(n: int) -> DataFrame:
        nonlocal start
        df = generate(spark, n, start)
        start += n
        return df

    try:
        progress(f"buffer: {3 * batches} batches of {batch_rows:,} rows, {drain_rows:,} to drain")
        # -- batch durations ---------------------------------------------------------------
        fast_sink = pg_sink(name("fast"))
        fast = timed_batches(fast_sink, [rows(batch_rows) for _ in range(batches)])
        sleep_s = (SLOW_FACTOR - 1) * statistics.median(fast)
        progress(f"fast p50 {statistics.median(fast):.3f}s; slow sinks sleep {sleep_s:.2f}s/tx")

        slow_table = name("slow")
        slow_sink = pg_sink(slow_table)
        slow_sink.preflight(rows(1).schema)
        slow_down(dsn, slow_table, sleep_s)
        slow = timed_batches(slow_sink, [rows(batch_rows) for _ in range(batches)])
        progress(f"slow unbuffered p50 {statistics.median(slow):.3f}s")

        buffered_table = name("slowbuf")
        target = pg_sink(buffered_table)
        buffer = KafkaBuffer(topic=buffered_table, bootstrap_servers=bootstrap, partitions=2)
        buffered = Buffered(target, buffer)
        buffered.preflight(rows(1).schema)
        slow_down(dsn, buffered_table, sleep_s)
        drainer = Drainer(target, buffer, batch_size=batch_rows, poll_interval_s=0.2)
        drainer.start()
        try:
            slow_buffered = timed_batches(buffered, [rows(batch_rows) for _ in range(batches)])
        finally:
            drainer.stop()
        progress(
            f"slow buffered p50 {statistics.median(slow_buffered):.3f}s; the drainer wrote "
            f"{drainer.total.written:,} rows meanwhile, lag {drainer.lag}"
        )
        if drainer.error is not None:
            raise RuntimeError(f"drainer failed: {drainer.error}")

        # -- drain throughput vs direct writes ---------------------------------------------
        direct_runs: list[float] = []
        drain_runs: list[float] = []
        pool_runs: list[float] = []
        drain_detail: list[dict[str, Any]] = []
        for i in range(drain_repeat):
            data = rows(drain_rows)
            progress(f"throughput run {i + 1}/{drain_repeat}: direct")
            direct_table = name(f"direct{i}")
            sink = pg_sink(direct_table)
            sink(rows(100), 0)  # the start (table, head, catalog) is not what we time
            began = time.perf_counter()
            sink(data, 1)
            direct_runs.append(time.perf_counter() - began)
            if count_rows(dsn, direct_table) != drain_rows + 100:
                raise RuntimeError("direct: wrong row count")

            progress(f"throughput run {i + 1}/{drain_repeat}: drain")
            drain_table = name(f"drain{i}")
            target = pg_sink(drain_table)
            buffer = KafkaBuffer(topic=drain_table, bootstrap_servers=bootstrap, partitions=2)
            feed = Buffered(target, buffer)
            feed.preflight(data.schema)
            feed(data, 0)
            # As `exactlyonce drain` runs it: a process of its own, its GIL switch interval set.
            drainer = Drainer(
                target,
                buffer,
                batch_size=20_000,
                switch_interval_s=DRAIN_PROCESS_SWITCH_INTERVAL_S,
            )
            try:
                began = time.perf_counter()
                report = drainer.drain_available(timeout_s=600)
                drain_runs.append(time.perf_counter() - began)
            finally:
                drainer.close()
            if report.written != drain_rows or count_rows(dsn, drain_table) != drain_rows:
                raise RuntimeError(f"drain: wrote {report.written:,} of {drain_rows:,}")
            drain_detail.append(
                {"batches": report.batches, "read": report.read, "skipped": report.skipped}
            )

            progress(f"throughput run {i + 1}/{drain_repeat}: {drain_processes} drain processes")
            pool_table = name(f"pool{i}")
            factory = functools.partial(
                pipeline, dsn, pool_table, bootstrap, os.environ["EXACTLYONCE_REDIS_URL"]
            )
            target, buffer = factory()
            feed = Buffered(target, buffer)
            feed.preflight(data.schema)
            feed(data, 0)
            with DrainerPool(factory, processes=drain_processes, batch_size=20_000) as pool:
                began = time.perf_counter()  # the processes are up (a drainer is a service)
                report = pool.drain_available(timeout_s=600)
                pool_runs.append(time.perf_counter() - began)
            if report.written != drain_rows or count_rows(dsn, pool_table) != drain_rows:
                raise RuntimeError(f"drain pool: wrote {report.written:,} of {drain_rows:,}")

        from bench.buffer_sinks import figures

        slowed_by = f"a pg_sleep trigger, {sleep_s:.3f}s per transaction"
        out = figures(
            fast, slow, slow_buffered, direct_runs, drain_runs, drain_rows, slowed_by, batch_rows
        )
        direct_rate = drain_rows / min(direct_runs)
        pool_rate = drain_rows / min(pool_runs)
        out.update(
            drain_processes=drain_processes,
            drain_pool_rows_per_s=round(pool_rate),
            drain_pool_vs_direct=ratio(pool_rate, direct_rate),
        )
        out["buffer"].update(
            timed_batches=batches - 1,
            slow_sleep_s_per_transaction=round(sleep_s, 3),
            drain_pool_runs_seconds=[round(s, 3) for s in pool_runs],
            drain_runs=drain_detail,
        )
        return out
    finally:
        drop(dsn, tables, queries)


def print_figures(f: dict[str, Any]) -> None:
    print(
        f"batch p99: fast {f['fast_batch_p99_s']:.3f}s, slow unbuffered "
        f"{f['slow_unbuffered_batch_p99_s']:.3f}s, slow buffered "
        f"{f['slow_buffered_batch_p99_s']:.3f}s -> buffered/fast {f['buffered_vs_fast_p99']:.3f} "
        f"(target <= {TARGET_BUFFERED_VS_FAST_P99})\n"
        f"drain {f['drain_rows_per_s']:,} rows/s vs direct {f['direct_rows_per_s']:,} rows/s "
        f"-> {f['drain_vs_direct']:.3f} (target >= {TARGET_DRAIN_VS_DIRECT}); "
        f"{f['drain_processes']} drain processes {f['drain_pool_rows_per_s']:,} rows/s -> "
        f"{f['drain_pool_vs_direct']:.3f}",
        flush=True,
    )


SINKS = ("postgres", "redis", "elasticsearch")


def run_sinks(
    spark: SparkSession, sinks: Sequence[str], args: argparse.Namespace, bootstrap: str
) -> dict[str, dict[str, Any]]:
    """The figures of every sink in ``sinks`` (PostgreSQL: :func:`run`; Redis and
    Elasticsearch: :mod:`bench.buffer_sinks`), one after the other in one Spark session."""
    from bench import buffer_sinks
    from bench.common import generate_rows
    from bench.elasticsearch import start_server as start_es_server
    from bench.redis_sink import Server as RedisServer

    out: dict[str, dict[str, Any]] = {}
    sizes = {
        "batch_rows": args.batch_rows,
        "batches": args.batches,
        "drain_rows": args.drain_rows,
        "drain_repeat": args.drain_repeat,
    }
    if "postgres" in sinks:
        out["postgres"] = run(
            spark,
            generate_rows,
            dsn=service("EXACTLYONCE_PG_DSN"),
            bootstrap=bootstrap,
            drain_processes=args.drain_processes,
            **sizes,
        )
    other: dict[str, tuple[Any, Any, int, int]] = {
        "redis": (RedisServer, buffer_sinks.redis_kit, args.batch_rows, args.drain_rows),
        "elasticsearch": (
            start_es_server,
            buffer_sinks.es_kit,
            args.es_batch_rows,
            args.es_drain_rows,
        ),
    }
    for first_id, sink in enumerate(s for s in sinks if s in other):
        start_server, kit_of, batch_rows, drain_rows = other[sink]
        server = start_server()
        try:
            out[sink] = buffer_sinks.measure(
                spark,
                generate_rows,
                kit_of(server.url),
                bootstrap=bootstrap,
                batch_rows=batch_rows,
                batches=args.batches,
                slow_batches=args.slow_batches,
                drain_rows=drain_rows,
                drain_repeat=args.drain_repeat,
                first_id=20_000_000 + 10_000_000 * first_id,
            )
        finally:
            server.stop()
    return out


def print_ratios(by_sink: dict[str, dict[str, Any]]) -> None:
    for sink, f in by_sink.items():
        print(
            f"{sink:>13}: batch p99 buffered (10x slowed sink) / fast "
            f"{f['buffered_vs_fast_p99']:.3f} (target <= {TARGET_BUFFERED_VS_FAST_P99}), "
            "drain / direct "
            f"{f['drain_vs_direct']:.3f} (target >= {TARGET_DRAIN_VS_DIRECT})",
            flush=True,
        )


def main(argv: Sequence[str] | None = None) -> int:
    import logging

    from bench.common import RESULTS_DIR, load_average, machine_with_load, now_utc, write_results
    from exactlyonce.integration.spark import session

    parser = argparse.ArgumentParser(prog="python -m bench.buffer", description=__doc__)
    parser.add_argument(
        "--sinks", default=",".join(SINKS), help="comma-separated: " + ", ".join(SINKS)
    )
    parser.add_argument("--batch-rows", type=int, default=20_000)
    parser.add_argument("--batches", type=int, default=11)
    parser.add_argument("--slow-batches", type=int, default=4, help="Redis/ES slow path, 1 untimed")
    parser.add_argument("--drain-rows", type=int, default=200_000)
    parser.add_argument("--drain-repeat", type=int, default=3)
    parser.add_argument("--drain-processes", type=int, default=2)
    parser.add_argument("--es-batch-rows", type=int, default=5_000)
    parser.add_argument("--es-drain-rows", type=int, default=100_000)
    parser.add_argument(
        "--merge-into-kafka-json",
        action="store_true",
        help="add the PostgreSQL figures to bench/results/kafka.json (marked as a separate run)",
    )
    args = parser.parse_args(argv)
    sinks = [s.strip() for s in args.sinks.split(",") if s.strip()]
    unknown = set(sinks) - set(SINKS)
    if unknown:
        parser.error(f"unknown sinks {sorted(unknown)}")
    os.environ.setdefault("EXACTLYONCE_REDIS_URL", service("EXACTLYONCE_REDIS_URL"))
    logging.getLogger("exactlyonce.redis").setLevel(logging.ERROR)  # no persistence: on purpose
    load_start = load_average()
    spark = session(
        "bench-buffer", master="local[2]", extra={"spark.ui.showConsoleProgress": "false"}
    )
    try:
        by_sink = run_sinks(spark, sinks, args, service("KAFKA_BOOTSTRAP_SERVERS"))
    finally:
        spark.stop()
    print(json.dumps(by_sink, indent=2))
    if "postgres" in by_sink:
        print_figures(by_sink["postgres"])
    print_ratios(by_sink)
    summary_ = {
        sink: {
            "buffered_vs_fast_p99": f["buffered_vs_fast_p99"],
            "drain_vs_direct": f["drain_vs_direct"],
            "met": f["buffered_vs_fast_p99"] <= TARGET_BUFFERED_VS_FAST_P99
            and f["drain_vs_direct"] >= TARGET_DRAIN_VS_DIRECT,
        }
        for sink, f in by_sink.items()
    }
    path = RESULTS_DIR / "buffer.json"
    kept = json.loads(path.read_text()) if path.exists() else {}
    write_results(
        "buffer",
        {
            **kept,
            "benchmark": "buffer",
            "date": now_utc(),
            "targets": {
                "buffered_vs_fast_p99": TARGET_BUFFERED_VS_FAST_P99,
                "drain_vs_direct": TARGET_DRAIN_VS_DIRECT,
            },
            "summary": {**kept.get("summary", {}), **summary_},
            "sinks": {**kept.get("sinks", {}), **by_sink},
            "machine": machine_with_load(load_start),
        },
    )
    if args.merge_into_kafka_json and "postgres" in by_sink:
        figures = by_sink["postgres"]
        kafka_path = RESULTS_DIR / "kafka.json"
        kept = json.loads(kafka_path.read_text()) if kafka_path.exists() else {}
        figures["buffer"]["run"] = (
            f"python -m bench.buffer, {now_utc()}: a separate run from the eos/plain keys"
        )
        write_results("kafka", {**kept, **figures})
    return 0


if __name__ == "__main__":
    sys.exit(main())
