"""PostgreSQL: our exactly-once sink against Spark's JDBC writer and a plain COPY ceiling.

``python -m bench postgres --rows 1000000`` writes the same N generated rows three ways, in
one Spark session, each into its own freshly created table:

``eos``
    ``PostgresSink(dsn, "bench_eos", id_columns=["id"], query_name=..., shards=2)`` with its
    defaults (so with the Redis ID catalog when the sink turns it on by default; its URL comes
    from ``$EXACTLYONCE_REDIS_URL`` or the services file), called as a ``foreachBatch``
    callable, ``sink(df, 0)``, on a cached DataFrame. The sink creates its table: the
    columns, ``record_id uuid`` and ``epoch bigint``, a unique index on ``record_id``. Every
    run uses a new ``query_name``, so its head and its catalog start empty; both are removed
    afterwards.
``eos_no_dedup`` (informational, ``--no-dedup-variant``, on by default)
    the same sink with ``dedup=False``: the PostgreSQL protocol alone.
``spark_jdbc``
    ``df.write.jdbc(..., mode="append")`` with ``batchsize=10000`` and
    ``reWriteBatchedInserts=true`` into ``bench_spark_jdbc (id text, value bigint, note text)``
    with a unique index on ``id``.
``raw_copy``
    ``df.mapInArrow(fn, "n long")``: each task opens one connection and one transaction and
    streams every Arrow batch, as CSV from ``pyarrow.csv``, through one
    ``COPY ... FROM STDIN (FORMAT csv)`` into ``bench_raw_copy`` (same DDL as ``spark_jdbc``).
    No IDs, no shuffle, no savepoints, no shard commits: the ceiling for a Python writer.
``raw_copy_sorted`` (informational, ``--sorted-ceiling``, on by default)
    ``raw_copy`` with each partition sorted by ``id`` first (the sort is timed). Inserting
    keys in index order makes PostgreSQL's unique-index maintenance much cheaper, so this is
    the ceiling to compare with once a sink sorts its shards. Not part of the targets.

The rows, ``(id string(32), value bigint, note string)``, come from ``spark.range(N)``
through md5/sha1, are repartitioned into 2 partitions, cached and counted before any
timing. Each path is warmed up once on a small table, then timed ``--repeat`` times (the
best counts); after every run the table must hold exactly N rows or the benchmark fails.
A sink run during which the catalog's Redis lost its data (another process restarted it; the
sink then recovers, and the rows are still right) is re-run, and listed as discarded.

Each round of timed runs starts with the ceilings (:mod:`bench.ceiling`): the same cached rows
into Spark's ``noop`` sink and through a ``mapInArrow`` that only counts. Every path is reported
as a fraction of both (``of_python_ceiling``, ``of_noop_ceiling``), and with the CPU seconds
(user + system) of the Spark tree, PostgreSQL and the catalog's Redis per million rows
(``cpu_s_per_million``; each run's ``cpu`` in its path's ``details``).

With ``--stream`` (the default) the sink and the COPY ceiling are also timed through a real
``readStream.parquet(...).writeStream.foreachBatch(...)`` query (one micro-batch with
``availableNow``), and the sink through Spark's format API as well
(``writeStream.format("exactlyonce")``, the same options); those figures include reading
Parquet and are reported separately, under ``stream``, with the format/foreachBatch ratio
also at the top as ``format_vs_foreach_batch`` (``bench summary`` draws it).
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import getpass
import inspect
import io
import os
import shutil
import tempfile
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from bench import common
from bench.ceiling import Ceilings, CpuMeter, cpu_per_million, service_pids, timed_cpu
from bench.common import BenchError, PathTiming, progress

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame, SparkSession

    from exactlyonce.secrets import Secret

NAME = "postgres"
JDBC_JAR = "/usr/share/java/postgresql.jar"
COLUMNS = ("id", "value", "note")
TABLES = {
    "eos": "bench_eos",
    "eos_no_dedup": "bench_eos_no_dedup",
    "spark_jdbc": "bench_spark_jdbc",
    "raw_copy": "bench_raw_copy",
    "raw_copy_sorted": "bench_raw_copy_sorted",
}
STREAM_TABLES = {
    "eos_stream": "bench_eos_stream",
    "eos_format_stream": "bench_eos_format_stream",
    "raw_copy_stream": "bench_raw_copy_stream",
}
QUERY_PREFIX = "bench-postgres-"
# issue 34: >= 0.9x a plain COPY, dedup on
TARGETS = {"eos_vs_spark_jdbc": 1.0, "eos_vs_raw_copy": 0.9}
MAX_DISTURBED = 3  # re-runs of a timing disturbed by someone else restarting Redis
ARROW_BATCH_CONF = "spark.sql.execution.arrow.maxRecordsPerBatch"


# -- where PostgreSQL is -----------------------------------------------------------------

# The services file is looked for under the current directory, then under the project root.
SERVICES_HOMES = (None, common.PROJECT_ROOT / ".exactlyonce")


def resolve_dsn(explicit: str | None) -> str:
    """``--dsn``, else ``$EXACTLYONCE_PG_DSN``, else the services file."""
    dsn = explicit or common.services_value("EXACTLYONCE_PG_DSN", SERVICES_HOMES)
    if not dsn:
        raise BenchError(
            "no PostgreSQL to benchmark against: start one with "
            "`python -m exactlyonce.integration.lab.services up`, set EXACTLYONCE_PG_DSN, "
            "or pass --dsn."
        )
    return dsn


@dataclass(frozen=True)
class JdbcTarget:
    """A libpq DSN as Spark's JDBC writer wants it; the password stays in ``properties``."""

    url: str
    user: str
    password: str | None
    extra: dict[str, str]

    def properties(self, **more: str) -> dict[str, str]:
        props = {"driver": "org.postgresql.Driver", "user": self.user, **self.extra, **more}
        if self.password is not None:
            props["password"] = self.password
        return props


def jdbc_target(dsn: str) -> JdbcTarget:
    """Convert a libpq DSN (URL or ``key=value`` form) to a JDBC URL and properties."""
    from psycopg.conninfo import conninfo_to_dict

    info = {k: str(v) for k, v in conninfo_to_dict(dsn).items() if v is not None}
    host = info.get("host") or os.environ.get("PGHOST") or "localhost"
    if "," in host or host.startswith("/"):
        raise BenchError(f"the JDBC driver needs one TCP host, not {host!r}")
    port = info.get("port") or os.environ.get("PGPORT") or "5432"
    user = info.get("user") or os.environ.get("PGUSER") or getpass.getuser()
    dbname = info.get("dbname") or os.environ.get("PGDATABASE") or user
    password = info.get("password") or os.environ.get("PGPASSWORD")
    extra = {k: info[k] for k in ("sslmode", "application_name") if k in info}
    if "connect_timeout" in info:
        extra["connectTimeout"] = info["connect_timeout"]
    host_part = f"[{host}]" if ":" in host else host
    return JdbcTarget(f"jdbc:postgresql://{host_part}:{port}/{dbname}", user, password, extra)


# -- SQL helpers ---------------------------------------------------------------------------


def _connect(dsn: str) -> Any:
    import psycopg

    return psycopg.connect(dsn, autocommit=True)


def server_version(dsn: str) -> str:
    with _connect(dsn) as conn:
        return str(conn.execute("SHOW server_version").fetchone()[0])


def drop_tables(dsn: str, *tables: str) -> None:
    from psycopg import sql

    with _connect(dsn) as conn:
        for table in tables:
            conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(sql.Identifier(table)))


def plain_table_ddl(table: str) -> list[str]:
    """The DDL of the ``spark_jdbc`` and ``raw_copy*`` targets (identical for all)."""
    return [
        f"CREATE TABLE {table} (id text, value bigint, note text)",
        f"CREATE UNIQUE INDEX {table}_id_key ON {table} (id)",
    ]


def create_plain_table(dsn: str, table: str) -> None:
    drop_tables(dsn, table)
    with _connect(dsn) as conn:
        for statement in plain_table_ddl(table):
            conn.execute(statement)


def table_ddl(dsn: str, table: str) -> list[str]:
    """The table's columns and indexes as the catalog has them (for the results file)."""
    with _connect(dsn) as conn:
        cols = conn.execute(
            "SELECT attname, format_type(atttypid, atttypmod), attnotnull FROM pg_attribute "
            "WHERE attrelid = %s::regclass AND attnum > 0 AND NOT attisdropped ORDER BY attnum",
            [table],
        ).fetchall()
        indexes = conn.execute(
            "SELECT indexdef FROM pg_indexes WHERE tablename = %s ORDER BY indexname", [table]
        ).fetchall()
    columns = ", ".join(f"{n} {t}{' NOT NULL' if nn else ''}" for n, t, nn in cols)
    return [f"CREATE TABLE {table} ({columns})", *(str(i[0]) for i in indexes)]


def count_rows(dsn: str, table: str) -> int:
    from psycopg import sql

    with _connect(dsn) as conn:
        row = conn.execute(sql.SQL("SELECT count(*) FROM {}").format(sql.Identifier(table)))
        return int(row.fetchone()[0])


def verify(dsn: str, table: str, expected: int, path: str) -> None:
    found = count_rows(dsn, table)
    if found != expected:
        raise BenchError(f"{path}: table {table} holds {found:,} rows, expected {expected:,}")


def checkpoint(dsn: str) -> None:
    """Flush dirty pages before a timed run so a checkpoint does not land inside it."""
    import psycopg

    try:
        with _connect(dsn) as conn:
            conn.execute("CHECKPOINT")
    except psycopg.Error:
        pass  # needs superuser or pg_checkpoint; the run is just noisier without it


# -- the three write paths -----------------------------------------------------------------


@dataclass(frozen=True)
class RawCopyWriter:
    """``mapInArrow`` function: every batch of the task as CSV through one COPY, one commit."""

    dsn: Secret
    table: str
    columns: tuple[str, ...]

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        import psycopg
        import pyarrow as pa
        import pyarrow.csv as pacsv
        from psycopg import sql

        options = pacsv.WriteOptions(include_header=False)
        statement = sql.SQL("COPY {} ({}) FROM STDIN (FORMAT csv)").format(
            sql.Identifier(self.table), sql.SQL(", ").join(map(sql.Identifier, self.columns))
        )
        rows = 0
        with psycopg.connect(self.dsn.reveal(), autocommit=False) as conn:
            with conn.cursor() as cur, cur.copy(statement) as copy:
                for batch in batches:
                    out = io.BytesIO()
                    pacsv.write_csv(batch.select(list(self.columns)), out, options)
                    copy.write(out.getbuffer())
                    rows += batch.num_rows
            conn.commit()
        yield pa.RecordBatch.from_pydict({"n": pa.array([rows], pa.int64())})


def write_raw_copy(df: DataFrame, dsn: str, table: str) -> int:
    from exactlyonce.secrets import Secret

    writer = RawCopyWriter(Secret(dsn), table, COLUMNS)
    return sum(int(r["n"]) for r in df.mapInArrow(writer, "n long").collect())


def sink_parameters() -> set[str]:
    from exactlyonce.connectors.postgres import PostgresSink

    return set(inspect.signature(PostgresSink.__init__).parameters)


def sink_variants(no_dedup_variant: bool) -> dict[str, dict[str, Any]]:
    """``eos`` is the sink as users get it (its defaults); ``eos_no_dedup`` (informational)
    turns the Redis ID catalog off, where the sink has one."""
    variants: dict[str, dict[str, Any]] = {"eos": {}}
    if no_dedup_variant and "dedup" in sink_parameters():
        variants["eos_no_dedup"] = {"dedup": False}
    return variants


def ensure_redis_env() -> str | None:
    """The sink's dedup catalog (on by default) reads ``$EXACTLYONCE_REDIS_URL``; fill it from
    the services file when unset. Returns the URL, or None when the sink has no catalog."""
    if "redis_url" not in sink_parameters():
        return None
    url = common.services_value("EXACTLYONCE_REDIS_URL", SERVICES_HOMES)
    if url:
        os.environ["EXACTLYONCE_REDIS_URL"] = url
    return url  # when None, the sink says what it needs if its defaults want Redis


def new_sink(
    dsn: str, table: str, label: str, shards: int, schema: Any, kwargs: dict[str, Any]
) -> Any:
    """A fresh sink over a fresh table, under a query name never used before (so its head
    and its dedup catalog start empty). The sink creates the table, outside the timing."""
    from exactlyonce.connectors.postgres import PostgresSink
    from exactlyonce.errors import ConfigError

    drop_tables(dsn, table)
    query_name = f"{QUERY_PREFIX}{label}-{uuid.uuid4().hex[:8]}"
    try:
        sink = PostgresSink(
            dsn, table, id_columns=["id"], query_name=query_name, shards=shards, **kwargs
        )
    except ConfigError as exc:
        raise BenchError(f"cannot build the sink: {exc}") from None
    sink.preflight(schema)
    return sink


def forget_sink(dsn: str, sink: Any) -> None:
    """Remove what a benchmark sink left outside its table: head, shard commits, catalog."""
    forget_queries(dsn, sink.query_name)
    common.forget_catalog(sink)


def forget_queries(dsn: str, query_name: str, like: bool = False) -> None:
    from psycopg import sql

    from exactlyonce.connectors.postgres.schema import DEAD_LETTERS, HEADS, SHARD_COMMITS

    op = sql.SQL("LIKE" if like else "=")
    with _connect(dsn) as conn:
        for name in (HEADS, SHARD_COMMITS, DEAD_LETTERS):
            if conn.execute("SELECT to_regclass(%s)", [name]).fetchone()[0] is None:
                continue
            conn.execute(
                sql.SQL("DELETE FROM {} WHERE query_name {} %s").format(sql.Identifier(name), op),
                [query_name],
            )


def purge_leftovers(dsn: str, redis_url: str | None) -> None:
    """Heads and catalogs of earlier benchmark runs that died before cleaning up."""
    forget_queries(dsn, QUERY_PREFIX + "%", like=True)
    if redis_url:
        common.delete_redis_keys(redis_url, "eo:{" + QUERY_PREFIX + "*")


def _report_detail(report: Any) -> dict[str, Any]:
    if report is None:
        return {}
    fields = dataclasses.asdict(report) if dataclasses.is_dataclass(report) else {}
    return {k: v for k, v in fields.items() if isinstance(v, (int, float)) and k != "epoch"}


def run_eos(
    df: DataFrame,
    dsn: str,
    table: str,
    shards: int,
    label: str,
    kwargs: dict[str, Any],
    meter: CpuMeter,
) -> tuple[float, dict[str, Any]]:
    sink = new_sink(dsn, table, label, shards, df.schema, kwargs)
    try:
        checkpoint(dsn)
        seconds, _, cpu = timed_cpu(meter, lambda: sink(df, 0))
        dedup = getattr(sink, "dedup_config", None) is not None
        detail = {"dedup": dedup, **_report_detail(sink.last_report), "cpu": cpu}
        if detail.get("catalog_rebuilds") or detail.get("shards_skipped"):
            # the catalog's Redis lost its data mid-run (another process restarted it): the
            # sink recovered and the rows are right, but the time measures the recovery
            detail["disturbed"] = "catalog lost mid-run; the sink recovered"
        return seconds, detail
    finally:
        forget_sink(dsn, sink)


def run_spark_jdbc(
    df: DataFrame, dsn: str, table: str, meter: CpuMeter
) -> tuple[float, dict[str, Any]]:
    target = jdbc_target(dsn)
    props = target.properties(batchsize="10000", reWriteBatchedInserts="true")
    create_plain_table(dsn, table)
    checkpoint(dsn)
    seconds, _, cpu = timed_cpu(
        meter, lambda: df.write.jdbc(target.url, table, mode="append", properties=props)
    )
    return seconds, {"cpu": cpu}


def run_raw_copy(
    df: DataFrame, dsn: str, table: str, meter: CpuMeter
) -> tuple[float, dict[str, Any]]:
    create_plain_table(dsn, table)
    checkpoint(dsn)
    seconds, rows, cpu = timed_cpu(meter, lambda: write_raw_copy(df, dsn, table))
    return seconds, {"rows_reported_by_tasks": rows, "cpu": cpu}


# -- the same through a real streaming query -----------------------------------------------


def _stream_once(
    spark: SparkSession,
    source: Path,
    schema: Any,
    fn: Callable[[DataFrame, int], None] | dict[str, str],
    checkpoint_dir: Path,
    meter: CpuMeter,
) -> tuple[float, dict[str, float]]:
    """One availableNow query: ``foreachBatch(fn)``, or with options ``format("exactlyonce")``;
    its wall seconds and CPU."""
    shutil.rmtree(checkpoint_dir, ignore_errors=True)
    stream = spark.readStream.schema(schema).parquet(str(source))
    if isinstance(fn, dict):
        writer = stream.writeStream.format("exactlyonce").options(**fn)
    else:
        writer = stream.writeStream.foreachBatch(fn)
    writer = writer.option("checkpointLocation", str(checkpoint_dir)).trigger(availableNow=True)

    def run_query() -> Any:
        query = writer.start()
        query.awaitTermination()
        return query

    seconds, query, cpu = timed_cpu(meter, run_query)
    if query.exception() is not None:
        raise BenchError(f"streaming query failed: {query.exception()}")
    return seconds, cpu


def run_eos_stream(
    spark: SparkSession,
    source: Path,
    schema: Any,
    dsn: str,
    table: str,
    shards: int,
    scratch: Path,
    meter: CpuMeter,
) -> tuple[float, dict[str, Any]]:
    sink = new_sink(dsn, table, "stream", shards, schema, {})
    try:
        checkpoint(dsn)
        seconds, cpu = _stream_once(spark, source, schema, sink, scratch / "ckpt-eos", meter)
    finally:
        forget_sink(dsn, sink)
    batches = [r for r in sink.reports if not r.skipped]
    written = sum(r.written for r in batches)
    return seconds, {"micro_batches": len(batches), "written": written, "cpu": cpu}


def run_eos_format_stream(
    spark: SparkSession,
    source: Path,
    schema: Any,
    dsn: str,
    table: str,
    shards: int,
    scratch: Path,
    meter: CpuMeter,
) -> tuple[float, dict[str, Any]]:
    """The same sink through Spark's format API (``format("exactlyonce")``)."""
    sink = new_sink(dsn, table, "format", shards, schema, {})
    options = {
        "sink": "postgres",
        "secret.dsn": dsn,  # a credential: under a name Spark redacts
        "table": table,
        "id_columns": "id",
        "query_name": sink.query_name,
        "shards": str(shards),
    }
    try:
        checkpoint(dsn)
        seconds, cpu = _stream_once(spark, source, schema, options, scratch / "ckpt-format", meter)
    finally:
        forget_sink(dsn, sink)
    return seconds, {"written": count_rows(dsn, table), "cpu": cpu}


def run_raw_copy_stream(
    spark: SparkSession,
    source: Path,
    schema: Any,
    dsn: str,
    table: str,
    scratch: Path,
    meter: CpuMeter,
) -> tuple[float, dict[str, Any]]:
    create_plain_table(dsn, table)
    checkpoint(dsn)
    batches: list[int] = []

    def each_batch(batch_df: DataFrame, epoch: int) -> None:
        batches.append(write_raw_copy(batch_df, dsn, table))

    seconds, cpu = _stream_once(spark, source, schema, each_batch, scratch / "ckpt-raw", meter)
    return seconds, {"micro_batches": len(batches), "cpu": cpu}


# -- the benchmark -------------------------------------------------------------------------


def add_arguments(parser: argparse.ArgumentParser) -> None:
    common.add_size_arguments(parser, rows=1_000_000, unit="rows", repeat=1)
    parser.add_argument("--dsn", help="libpq DSN (default: $EXACTLYONCE_PG_DSN / services.env)")
    parser.add_argument(
        "--stream",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="also time the sink and COPY through a real readStream/foreachBatch query",
    )
    parser.add_argument(
        "--conf",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="extra Spark configuration, repeatable (e.g. " + ARROW_BATCH_CONF + "=50000)",
    )
    common.add_results_arguments(parser, NAME)
    parser.add_argument(
        "--sorted-ceiling",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="also time raw_copy with partitions sorted by id (informational)",
    )
    parser.add_argument(
        "--no-dedup-variant",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="also time the sink with dedup=False (informational; the default sink is judged)",
    )
    parser.add_argument("--keep-tables", action="store_true", help="leave the tables behind")
    parser.add_argument(
        "--fail-on-targets", action="store_true", help="exit 2 when a target is not met"
    )


def _spark_conf(pairs: list[str]) -> dict[str, str]:
    conf = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise BenchError(f"--conf wants KEY=VALUE, got {pair!r}")
        conf[key.strip()] = value.strip()
    return conf


def run(args: argparse.Namespace) -> dict[str, Any]:
    common.check_run_sizes(args)
    if not Path(JDBC_JAR).is_file():
        raise BenchError(f"{JDBC_JAR} is missing: apt-get install -y libpostgresql-jdbc-java")
    dsn = resolve_dsn(args.dsn)
    from exactlyonce.secrets import redact_dsn

    load_start = common.load_average()
    pg_version = server_version(dsn)
    redis_url = ensure_redis_env()
    purge_leftovers(dsn, redis_url)
    progress(f"PostgreSQL {pg_version} at {redact_dsn(dsn)}")

    common.ensure_workers_import_bench()
    from exactlyonce.integration.spark import session

    os.environ.setdefault("EXACTLYONCE_SPARK_LOG_LEVEL", "ERROR")
    conf = {
        "spark.jars": JDBC_JAR,
        "spark.ui.showConsoleProgress": "false",
        **_spark_conf(args.conf),
    }
    progress(f"starting Spark (local[{common.PARTITIONS}]) with {conf}")
    spark = session("exactlyonce-bench-postgres", extra=conf)
    arrow_batch = spark.conf.get(ARROW_BATCH_CONF)

    progress(f"generating and caching {args.warmup_rows:,} warm-up rows")
    small = common.generate_rows(spark, args.warmup_rows)
    progress(f"generating and caching {args.rows:,} rows in {common.PARTITIONS} partitions")
    df = common.generate_rows(spark, args.rows)

    meter = CpuMeter(service_pids("postgres", "redis"))
    paths: dict[str, Callable[[DataFrame], tuple[float, dict[str, Any]]]] = {
        name: functools.partial(
            run_eos,
            dsn=dsn,
            table=TABLES[name],
            shards=args.shards,
            label=name,
            kwargs=kw,
            meter=meter,
        )
        for name, kw in sink_variants(args.no_dedup_variant).items()
    }
    paths |= {
        "spark_jdbc": lambda d: run_spark_jdbc(d, dsn, TABLES["spark_jdbc"], meter),
        "raw_copy": lambda d: run_raw_copy(d, dsn, TABLES["raw_copy"], meter),
    }
    if args.sorted_ceiling:
        paths["raw_copy_sorted"] = lambda d: run_raw_copy(
            d.sortWithinPartitions("id"), dsn, TABLES["raw_copy_sorted"], meter
        )
    ceilings = Ceilings(args.rows, meter)
    _warm_up(paths, TABLES, small, dsn, args)
    ceilings.warm(small, args.warmup_rows)
    ddl = {name: table_ddl(dsn, TABLES[name]) for name in paths}
    timings = _timed_runs(paths, TABLES, df, dsn, args, lambda: ceilings.time(df))

    stream_timings: dict[str, PathTiming] = {}
    if args.stream:
        stream_timings = _run_streams(spark, df, small, dsn, args, meter)

    eos, jdbc, raw = timings["eos"], timings["spark_jdbc"], timings["raw_copy"]
    vs_jdbc = common.ratio(eos.rows_per_s, jdbc.rows_per_s)
    vs_raw = common.ratio(eos.rows_per_s, raw.rows_per_s)
    print()
    table = common.print_table(
        list(timings.values()),
        "eos",
        title=f"PostgreSQL, {args.rows:,} rows, local[{common.PARTITIONS}], best of {args.repeat}",
    )
    print(f"eos/spark_jdbc = {vs_jdbc:.3f}x (target >= {TARGETS['eos_vs_spark_jdbc']}x)")
    print(f"eos/raw_copy   = {vs_raw:.3f}x (target >= {TARGETS['eos_vs_raw_copy']}x)")
    print(
        f"of the Python ceiling ({ceilings.python.rows_per_s:,.0f} rows/s): "
        f"eos {common.ratio(eos.rows_per_s, ceilings.python.rows_per_s):.3f}, "
        f"spark_jdbc {common.ratio(jdbc.rows_per_s, ceilings.python.rows_per_s):.3f}"
    )
    sorted_ceiling = timings.get("raw_copy_sorted")
    vs_sorted = common.ratio(eos.rows_per_s, sorted_ceiling.rows_per_s) if sorted_ceiling else None
    if sorted_ceiling:
        print(f"eos/raw_copy_sorted = {vs_sorted:.3f}x (informational)")
    if stream_timings:
        print()
        common.print_table(
            list(stream_timings.values()),
            "eos_stream",
            title="through readStream.parquet -> writeStream.foreachBatch (one micro-batch)",
        )
        s_format, s_eos = stream_timings["eos_format_stream"], stream_timings["eos_stream"]
        format_ratio = common.ratio(s_format.rows_per_s, s_eos.rows_per_s)
        print(f"format('exactlyonce')/foreachBatch = {format_ratio:.3f}x (same sink, same rows)")

    met = {
        "eos_vs_spark_jdbc": vs_jdbc >= TARGETS["eos_vs_spark_jdbc"],
        "eos_vs_raw_copy": vs_raw >= TARGETS["eos_vs_raw_copy"],
    }
    result: dict[str, Any] = {
        "benchmark": NAME,
        "date": common.now_utc(),
        "rows": args.rows,
        "repeat": args.repeat,
        "warmup_rows": args.warmup_rows,
        "eos_rows_per_s": round(eos.rows_per_s),
        "spark_jdbc_rows_per_s": round(jdbc.rows_per_s),
        "raw_copy_rows_per_s": round(raw.rows_per_s),
        "eos_vs_spark_jdbc": vs_jdbc,
        "eos_vs_raw_copy": vs_raw,
        **(
            {
                "raw_copy_sorted_rows_per_s": round(sorted_ceiling.rows_per_s),
                "eos_vs_raw_copy_sorted": vs_sorted,
            }
            if sorted_ceiling
            else {}
        ),
        **_variant_figures(timings, "eos_no_dedup", jdbc, raw),
        **ceilings.figures(timings),
        "targets": {
            key: {"target": TARGETS[key], "measured": value, "met": met[key]}
            for key, value in (("eos_vs_spark_jdbc", vs_jdbc), ("eos_vs_raw_copy", vs_raw))
        },
        "targets_met": all(met.values()),
        "paths": {name: t.as_dict() for name, t in timings.items()},
        "table": table.splitlines(),
        "setup": {
            **common.spark_setup(spark, args.shards),
            "arrow_max_records_per_batch": arrow_batch,
            "spark_conf": conf,
            "spark_jdbc_properties": {"batchsize": "10000", "reWriteBatchedInserts": "true"},
            "rows_schema": common.ROWS_SCHEMA,
            "ddl": ddl,
            "eos_dedup_config": _dedup_config_text(),
            "postgres": pg_version,
        },
        "machine": common.machine_with_load(load_start),
        "versions": {
            **common.versions("pyspark", "pyarrow", "psycopg"),
            "java": spark.sparkContext._jvm.java.lang.System.getProperty("java.version"),
        },
    }
    if stream_timings:
        s_eos, s_raw = stream_timings["eos_stream"], stream_timings["raw_copy_stream"]
        s_format = stream_timings["eos_format_stream"]
        # Informational (no target): the Python Data Source path against foreachBatch.
        result["format_vs_foreach_batch"] = common.ratio(s_format.rows_per_s, s_eos.rows_per_s)
        result["stream"] = {
            "eos_stream_rows_per_s": round(s_eos.rows_per_s),
            "eos_format_stream_rows_per_s": round(s_format.rows_per_s),
            "eos_format_stream_vs_eos_stream": common.ratio(s_format.rows_per_s, s_eos.rows_per_s),
            "raw_copy_stream_rows_per_s": round(s_raw.rows_per_s),
            "eos_stream_vs_raw_copy_stream": common.ratio(s_eos.rows_per_s, s_raw.rows_per_s),
            "paths": {name: t.as_dict() for name, t in stream_timings.items()},
            "cpu_s_per_million": cpu_per_million(stream_timings),
        }
    common.save_results(args, result)
    if not args.keep_tables:
        drop_tables(dsn, *TABLES.values(), *STREAM_TABLES.values())
    purge_leftovers(dsn, redis_url)
    spark.stop()
    return result


def _dedup_config_text() -> str | None:
    """How the default sink's dedup catalog is configured (its repr hides the Redis URL)."""
    if "dedup" not in sink_parameters():
        return None
    from exactlyonce.connectors.postgres import PostgresSinkConfig

    default = PostgresSinkConfig.model_fields["dedup"].default
    if default is False:
        return "off by default"
    try:
        from exactlyonce.dedup.catalog import DedupConfig

        return f"on by default: {DedupConfig(redis_url='redis://-')!r}"
    except Exception:  # the catalog's API moved: say what we know
        return "on by default"


def _variant_figures(
    timings: dict[str, PathTiming], name: str, jdbc: PathTiming, raw: PathTiming
) -> dict[str, Any]:
    variant = timings.get(name)
    if variant is None:
        return {}
    return {
        f"{name}_rows_per_s": round(variant.rows_per_s),
        f"{name}_vs_spark_jdbc": common.ratio(variant.rows_per_s, jdbc.rows_per_s),
        f"{name}_vs_raw_copy": common.ratio(variant.rows_per_s, raw.rows_per_s),
    }


Source = TypeVar("Source")


def _warm_up(
    paths: dict[str, Callable[[Source], tuple[float, dict[str, Any]]]],
    tables: dict[str, str],
    source: Source,
    dsn: str,
    args: argparse.Namespace,
) -> None:
    """One untimed, verified run of every path on the warm-up rows."""
    for name, fn in paths.items():
        seconds, _ = fn(source)
        verify(dsn, tables[name], args.warmup_rows, f"{name} warm-up")
        progress(f"warm-up {name}: {args.warmup_rows:,} rows in {seconds:.2f}s")


def _timed_runs(
    paths: dict[str, Callable[[Source], tuple[float, dict[str, Any]]]],
    tables: dict[str, str],
    source: Source,
    dsn: str,
    args: argparse.Namespace,
    each_round: Callable[[], None] | None = None,
) -> dict[str, PathTiming]:
    """``--repeat`` verified runs of every path, interleaved so drift hits every path alike
    (``each_round`` first in each round: the ceilings); a run disturbed by someone else
    restarting Redis is discarded and run again."""
    timings = {name: PathTiming(name, args.rows) for name in paths}
    for attempt in range(1, args.repeat + 1):
        if each_round is not None:
            progress(f"run {attempt}/{args.repeat}: ceilings (noop, Python)")
            each_round()
        for name, fn in paths.items():
            for _ in range(MAX_DISTURBED + 1):
                seconds, detail = fn(source)
                verify(dsn, tables[name], args.rows, name)
                if "disturbed" not in detail:
                    break
                timings[name].discarded.append({"seconds": round(seconds, 4), **detail})
                progress(f"run {attempt}/{args.repeat} {name}: discarded, {detail['disturbed']}")
            timings[name].record(seconds, detail)
            progress(
                f"run {attempt}/{args.repeat} {name}: {args.rows:,} rows in {seconds:.2f}s "
                f"= {args.rows / seconds:,.0f} rows/s (verified)"
            )
    return timings


def _run_streams(
    spark: SparkSession,
    df: DataFrame,
    small: DataFrame,
    dsn: str,
    args: argparse.Namespace,
    meter: CpuMeter,
) -> dict[str, PathTiming]:
    scratch = Path(tempfile.mkdtemp(prefix="exactlyonce-bench-"))
    try:
        sources = {}
        for label, frame in (("small", small), ("full", df)):
            sources[label] = scratch / f"src-{label}"
            frame.write.parquet(str(sources[label]))
        progress(f"wrote the rows as Parquet under {scratch} for the streaming runs")
        schema = df.schema
        paths: dict[str, Callable[[Path], tuple[float, dict[str, Any]]]] = {
            "eos_stream": lambda src: run_eos_stream(
                spark, src, schema, dsn, STREAM_TABLES["eos_stream"], args.shards, scratch, meter
            ),
            "eos_format_stream": lambda src: run_eos_format_stream(
                spark,
                src,
                schema,
                dsn,
                STREAM_TABLES["eos_format_stream"],
                args.shards,
                scratch,
                meter,
            ),
            "raw_copy_stream": lambda src: run_raw_copy_stream(
                spark, src, schema, dsn, STREAM_TABLES["raw_copy_stream"], scratch, meter
            ),
        }
        _warm_up(paths, STREAM_TABLES, sources["small"], dsn, args)
        return _timed_runs(paths, STREAM_TABLES, sources["full"], dsn, args)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def main(args: argparse.Namespace) -> int:
    return common.exit_code(
        run,
        args,
        failure_prefix="bench postgres: FAILED",
        fail_on_miss=args.fail_on_targets,
        targets_met=lambda result: bool(result["targets_met"]),
    )
