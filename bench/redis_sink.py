"""Redis: our exactly-once sink against plain pipelined writes of the same records.

``python -m bench.redis_sink --rows 300000`` writes the same N generated rows two ways, in one
Spark session (``local[2]``), into one dedicated ``redis-server`` (started here on a free port,
no persistence, so both paths meet the same server and the ratio measures the protocol):

``eos``
    ``RedisSink(url, "bench:eos:<run>:{id}", id_columns=["id"], query_name=..., write=...,
    shards=2)`` with its other defaults: the ID catalog on (in the catalog's Redis from
    ``$EXACTLYONCE_REDIS_URL`` or the services file, as users run it), ``pipeline_size`` 10,000.
    Called as a ``foreachBatch`` callable, ``sink(df, 0)``, on a cached DataFrame: record IDs,
    the shuffle into shards, dedup, chunked staging, one atomic apply script per shard, the
    shard markers and the head.
``plain``
    ``df.mapInArrow(fn, "n long")``: each task opens one client and sends every record as
    ``HSET bench:plain:<run>:<id> id .. value .. note ..`` (``XADD`` for ``--write stream``,
    ``SET`` of the JSON for ``string``) through a non-transactional pipeline flushed every
    10,000 commands: at-least-once, no IDs, no shuffle, no atomicity.

The rows ``(id string(32), value bigint, note string)`` come from ``spark.range(N)`` through
md5/sha1, 2 partitions, cached and counted before any timing. Each path is warmed up on a small
run first, then timed ``--repeat`` times (3), the paths interleaved; the best run counts (the
machine is shared, single runs are noisy). After each run the server must hold exactly N
records of the path, or the benchmark fails. Writes
``bench/results/redis.json`` with ``eos_records_per_s``, ``plain_records_per_s``, ``ratio``
(eos / plain) and ``rows``.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bench.common import (
    PathTiming,
    machine_info,
    now_utc,
    print_table,
    progress,
    ratio,
    timed,
    versions,
    write_results,
)

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame, SparkSession

NAME = "redis"
PARTITIONS = 2
TARGET = 0.8
QUERY_PREFIX = "bench-redis-"


class BenchError(RuntimeError):
    """The benchmark cannot run, or a path wrote the wrong number of records."""


# -- the server ----------------------------------------------------------------------------


class Server:
    """A throwaway redis-server for the records of both paths."""

    def __init__(self) -> None:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = int(s.getsockname()[1])
        self.dir = Path(tempfile.mkdtemp(prefix="eo-bench-redis-"))
        self.proc = subprocess.Popen(
            [
                "redis-server",
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                str(self.dir),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        import redis

        deadline = time.monotonic() + 30
        while True:
            try:
                redis.Redis(port=self.port).ping()
                break
            except redis.ConnectionError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    raise BenchError("redis-server did not start") from None
                time.sleep(0.05)

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def client(self) -> Any:
        import redis

        return redis.Redis(port=self.port, socket_timeout=120)

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        shutil.rmtree(self.dir, ignore_errors=True)


def count_records(server: Server, prefix: str, write: str) -> int:
    r = server.client()
    if write == "stream":
        return sum(int(r.xlen(k)) for k in r.scan_iter(match=f"{prefix}*", count=10_000))
    return sum(1 for _ in r.scan_iter(match=f"{prefix}*", count=10_000))


def clear(server: Server) -> None:
    server.client().flushdb()


# -- the rows ------------------------------------------------------------------------------


def generate(spark: SparkSession, n: int) -> DataFrame:
    """N deterministic rows ``(id string(32), value bigint, note string)``, cached, counted."""
    from pyspark.sql import functions as F

    key = F.col("id").cast("string")
    df = spark.range(n).select(
        F.md5(key).alias("id"),
        (F.col("id") * F.lit(2654435761) % F.lit(1_000_000_007)).alias("value"),
        F.concat(F.lit("note-"), F.substring(F.sha1(key), 1, 10)).alias("note"),
    )
    df = df.repartition(PARTITIONS).cache()
    if df.count() != n:
        raise BenchError(f"generated a wrong number of rows, expected {n}")
    return df


# -- the two write paths -------------------------------------------------------------------


@dataclass(frozen=True)
class PlainWriter:
    """``mapInArrow`` function: pipelined writes, one command per record, no protocol."""

    url: str
    prefix: str
    write: str
    pipeline_size: int = 10_000

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        import pyarrow as pa
        import redis

        client = redis.Redis.from_url(self.url, socket_timeout=120)
        pipe = client.pipeline(transaction=False)
        rows = queued = 0
        for batch in batches:
            ids = batch.column("id").to_pylist()
            values = batch.column("value").to_pylist()
            notes = batch.column("note").to_pylist()
            for rid, value, note in zip(ids, values, notes, strict=True):
                if self.write == "hash":
                    key = f"{self.prefix}{rid}"
                    pipe.execute_command("HSET", key, "id", rid, "value", value, "note", note)
                elif self.write == "string":
                    record = json.dumps({"id": rid, "value": value, "note": note})
                    pipe.execute_command("SET", f"{self.prefix}{rid}", record)
                else:
                    key = f"{self.prefix}{rid[:2]}"  # 256 streams, like the sink's {bucket}
                    pipe.execute_command("XADD", key, "*", "id", rid, "value", value, "note", note)
                queued += 1
                if queued >= self.pipeline_size:
                    pipe.execute()
                    queued = 0
            rows += batch.num_rows
        if queued:
            pipe.execute()
        client.close()
        yield pa.RecordBatch.from_pydict({"n": pa.array([rows], pa.int64())})


def run_plain(df: DataFrame, server: Server, write: str, label: str) -> tuple[float, str]:
    prefix = f"bench:plain:{label}:"
    fn = PlainWriter(server.url, prefix, write)
    seconds, _ = timed(lambda: sum(int(r["n"]) for r in df.mapInArrow(fn, "n long").collect()))
    return seconds, prefix


def run_eos(
    df: DataFrame, server: Server, write: str, label: str, shards: int, pipeline_size: int
) -> tuple[float, dict[str, Any], str]:
    from exactlyonce.connectors.redis import RedisSink

    prefix = f"bench:eos:{label}:"
    if write == "stream":
        from pyspark.sql import functions as F

        df = df.withColumn("bucket", F.substring("id", 1, 2))
    template = prefix + ("{bucket}" if write == "stream" else "{id}")
    sink = RedisSink(
        server.url,
        template,
        ["id"],
        query_name=f"{QUERY_PREFIX}{label}",
        write=write,  # type: ignore[arg-type]
        shards=shards,
        pipeline_size=pipeline_size,
    )
    sink.preflight(df.schema)
    try:
        seconds, _ = timed(lambda: sink(df, 0))
        report = sink.last_report
        assert report is not None
        detail = {
            k: v
            for k, v in vars(report).items()
            if isinstance(v, (int, float)) and not isinstance(v, bool) and k != "epoch"
        }
        detail["dedup"] = sink.dedup_config is not None
    finally:
        forget_catalog(sink)
    return seconds, detail, prefix


def forget_catalog(sink: Any) -> None:
    config = getattr(sink, "dedup_config", None)
    if config is None:
        return
    import redis

    from exactlyonce.dedup.catalog import namespace

    client = redis.Redis.from_url(config.redis_url, socket_timeout=30)
    keys = list(client.scan_iter(match=namespace(sink.query_name, sink.sink_name) + ":*"))
    for i in range(0, len(keys), 1000):
        client.unlink(*keys[i : i + 1000])
    client.close()


# -- running -------------------------------------------------------------------------------


def services_value(key: str) -> str | None:
    if os.environ.get(key):
        return os.environ[key]
    try:
        from exactlyonce.integration.services import service_env

        return service_env(Path(__file__).resolve().parent.parent / ".exactlyonce")[key]
    except (ImportError, RuntimeError, KeyError):
        return None


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--rows", type=int, default=300_000, help="records per path (300,000)")
    parser.add_argument("--repeat", type=int, default=3, help="timed runs per path; best wins")
    parser.add_argument("--warmup-rows", type=int, default=20_000, help="rows of the warm-up")
    parser.add_argument("--shards", type=int, default=2, help="the sink's shards (2)")
    parser.add_argument(
        "--write", default="hash", choices=["hash", "string", "stream"], help="write mode (hash)"
    )
    parser.add_argument(
        "--pipeline-size", type=int, default=10_000, help="the sink's records per chunk"
    )
    parser.add_argument(
        "--results-name", default=NAME, help="write bench/results/<name>.json (redis)"
    )
    parser.add_argument(
        "--fail-on-target", action="store_true", help=f"exit 2 when eos/plain < {TARGET}"
    )


def _ensure_workers_import_bench() -> None:
    """Spark's Python workers unpickle ``PlainWriter`` by reference: put ``bench`` on their
    path (they inherit the JVM's environment, which inherits ours)."""
    root = str(Path(__file__).resolve().parent.parent)
    paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    if root not in paths:
        os.environ["PYTHONPATH"] = os.pathsep.join([root, *paths])


def _load() -> float | None:
    try:
        return round(os.getloadavg()[0], 2)
    except OSError:
        return None


def run(args: argparse.Namespace) -> dict[str, Any]:
    if args.rows < 1 or args.repeat < 1 or args.warmup_rows < 1:
        raise BenchError("--rows, --repeat and --warmup-rows must be positive")
    catalog_url = services_value("EXACTLYONCE_REDIS_URL")
    if not catalog_url:
        raise BenchError(
            "the sink's ID catalog needs the catalog's Redis: run "
            "`python -m exactlyonce.integration.services up` or set EXACTLYONCE_REDIS_URL"
        )
    os.environ["EXACTLYONCE_REDIS_URL"] = catalog_url
    _ensure_workers_import_bench()
    from exactlyonce.integration.spark import session

    # The records' server is deliberately without persistence (both paths meet the same one):
    # the sink's warning about it would repeat for every run.
    logging.getLogger("exactlyonce.redis").setLevel(logging.ERROR)
    load_start = _load()
    server = Server()
    progress(f"redis-server for the records on port {server.port}")
    spark = session("exactlyonce-bench-redis", extra={"spark.ui.showConsoleProgress": "false"})
    try:
        small = generate(spark, args.warmup_rows)
        df = generate(spark, args.rows)
        progress(f"{args.rows:,} rows generated and cached")
        eos = PathTiming("eos", args.rows)
        plain = PathTiming("plain", args.rows)
        run_id = uuid.uuid4().hex[:8]
        runs = [("warm", small, False)] + [(f"run{i + 1}", df, True) for i in range(args.repeat)]
        for label, data, timed_run in runs:
            for path in ("plain", "eos"):
                clear(server)
                tag = f"{run_id}-{label}-{path}"
                if path == "eos":
                    seconds, detail, prefix = run_eos(
                        data, server, args.write, tag, args.shards, args.pipeline_size
                    )
                else:
                    seconds, prefix = run_plain(data, server, args.write, tag)
                    detail = {}
                expected = args.rows if timed_run else args.warmup_rows
                found = count_records(server, prefix, args.write)
                if found != expected:
                    raise BenchError(f"{path} ({label}) left {found} records, expected {expected}")
                if timed_run:
                    target = eos if path == "eos" else plain
                    target.runs.append(seconds)
                    target.details.append(detail)
                progress(f"{path} {label}: {expected:,} records in {seconds:.2f}s")
        table = print_table(
            [plain, eos], "eos", title=f"Redis, write={args.write}, {args.rows:,} records"
        )
        r = ratio(eos.rows_per_s, plain.rows_per_s)
        print(f"eos/plain = {r:.3f} (target >= {TARGET})")
        result: dict[str, Any] = {
            "benchmark": NAME,
            "date": now_utc(),
            "write": args.write,
            "rows": args.rows,
            "repeat": args.repeat,
            "eos_records_per_s": round(eos.rows_per_s),
            "plain_records_per_s": round(plain.rows_per_s),
            "ratio": r,
            "target": {"ratio": TARGET, "met": r >= TARGET},
            "paths": {"eos": eos.as_dict(), "plain": plain.as_dict()},
            "table": table.splitlines(),
            "setup": {
                "spark_master": spark.sparkContext.master,
                "partitions": PARTITIONS,
                "eos_shards": args.shards,
                "eos_pipeline_size": args.pipeline_size,
                "plain_pipeline_size": 10_000,
                "records_server": "redis-server 7, no persistence, both paths",
                "catalog": "the services' Redis (separate server), the sink's default dedup",
                "rows_schema": "id string (32 hex chars), value bigint, note string (15 chars)",
            },
            "machine": {**machine_info(), "load_average_1m": {"start": load_start, "end": _load()}},
            "versions": versions("pyspark", "pyarrow", "redis"),
        }
        written = write_results(args.results_name, result)
        progress(f"wrote {written}")
        return result
    finally:
        spark.stop()
        server.stop()


def main(args: argparse.Namespace) -> int:
    try:
        result = run(args)
    except BenchError as exc:
        print(f"bench redis: {exc}", file=sys.stderr)
        return 1
    if args.fail_on_target and not result["target"]["met"]:
        return 2
    return 0


def cli(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.redis_sink", description=(__doc__ or "").split("\n\n")[0]
    )
    add_arguments(parser)
    return main(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(cli())
