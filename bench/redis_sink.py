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
records of the path, or the benchmark fails. Each round starts with the ceilings
(:mod:`bench.ceiling`: the same rows into Spark's ``noop`` sink and through a counting
``mapInArrow``). Writes ``bench/results/redis.json`` with ``eos_records_per_s``,
``plain_records_per_s``, ``ratio`` (eos / plain), ``rows``, each path as a fraction of the
ceilings (``of_python_ceiling``, ``of_noop_ceiling``) and the CPU seconds per million records
(``cpu_s_per_million``) of the Spark tree, the records' redis-server and the catalog's Redis.
"""

from __future__ import annotations

import argparse
import json
import logging
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

from bench import common
from bench.ceiling import Ceilings, CpuMeter, service_pids, timed_cpu
from bench.common import BenchError, PathTiming, progress

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame

NAME = "redis"
TARGET = 0.8
QUERY_PREFIX = "bench-redis-"


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
        common.stop_process(self.proc)
        shutil.rmtree(self.dir, ignore_errors=True)


def count_records(server: Server, prefix: str, write: str) -> int:
    r = server.client()
    if write == "stream":
        return sum(int(r.xlen(k)) for k in r.scan_iter(match=f"{prefix}*", count=10_000))
    return sum(1 for _ in r.scan_iter(match=f"{prefix}*", count=10_000))


def clear(server: Server) -> None:
    server.client().flushdb()


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


def run_plain(
    df: DataFrame, server: Server, write: str, label: str, meter: CpuMeter
) -> tuple[float, dict[str, Any], str]:
    prefix = f"bench:plain:{label}:"
    fn = PlainWriter(server.url, prefix, write)
    seconds, _, cpu = timed_cpu(
        meter, lambda: sum(int(r["n"]) for r in df.mapInArrow(fn, "n long").collect())
    )
    return seconds, {"cpu": cpu}, prefix


def run_eos(
    df: DataFrame,
    server: Server,
    write: str,
    label: str,
    shards: int,
    pipeline_size: int,
    meter: CpuMeter,
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
        seconds, _, cpu = timed_cpu(meter, lambda: sink(df, 0))
        detail = {**common.sink_report_detail(sink), "cpu": cpu}
    finally:
        common.forget_catalog(sink)
    return seconds, detail, prefix


# -- running -------------------------------------------------------------------------------


def add_arguments(parser: argparse.ArgumentParser) -> None:
    common.add_size_arguments(parser, rows=300_000, unit="records", repeat=3)
    parser.add_argument(
        "--write", default="hash", choices=["hash", "string", "stream"], help="write mode (hash)"
    )
    parser.add_argument(
        "--pipeline-size", type=int, default=10_000, help="the sink's records per chunk"
    )
    common.add_results_arguments(parser, NAME)
    common.add_fail_on_target_argument(parser, TARGET)


def run(args: argparse.Namespace) -> dict[str, Any]:
    common.prepare_sink_run(args)
    from exactlyonce.integration.spark import session

    # The records' server is deliberately without persistence (both paths meet the same one):
    # the sink's warning about it would repeat for every run.
    logging.getLogger("exactlyonce.redis").setLevel(logging.ERROR)
    load_start = common.load_average()
    server = Server()
    progress(f"redis-server for the records on port {server.port}")
    spark = session("exactlyonce-bench-redis", extra={"spark.ui.showConsoleProgress": "false"})
    try:
        small = common.generate_rows(spark, args.warmup_rows)
        df = common.generate_rows(spark, args.rows)
        progress(f"{args.rows:,} rows generated and cached")
        eos = PathTiming("eos", args.rows)
        plain = PathTiming("plain", args.rows)
        meter = CpuMeter({"redis_records": server.proc.pid, **service_pids("redis")})
        ceilings = Ceilings(args.rows, meter)
        run_id = uuid.uuid4().hex[:8]
        for label, data, timed_run in common.warm_then_timed(small, df, args.repeat):
            expected = args.rows if timed_run else args.warmup_rows
            ceilings.round(data, expected, timed_run)
            for path in ("plain", "eos"):
                clear(server)
                tag = f"{run_id}-{label}-{path}"
                if path == "eos":
                    seconds, detail, prefix = run_eos(
                        data, server, args.write, tag, args.shards, args.pipeline_size, meter
                    )
                else:
                    seconds, detail, prefix = run_plain(data, server, args.write, tag, meter)
                found = count_records(server, prefix, args.write)
                if found != expected:
                    raise BenchError(f"{path} ({label}) left {found} records, expected {expected}")
                if timed_run:
                    (eos if path == "eos" else plain).record(seconds, detail)
                progress(f"{path} {label}: {expected:,} records in {seconds:.2f}s")
        table = common.print_table(
            [plain, eos], "eos", title=f"Redis, write={args.write}, {args.rows:,} records"
        )
        r = common.ratio(eos.rows_per_s, plain.rows_per_s)
        print(f"eos/plain = {r:.3f} (target >= {TARGET})")
        figures = ceilings.figures({"eos": eos, "plain": plain})
        print(f"of the Python ceiling: {figures['of_python_ceiling']}")
        result: dict[str, Any] = {
            "benchmark": NAME,
            "date": common.now_utc(),
            "write": args.write,
            "rows": args.rows,
            "repeat": args.repeat,
            "eos_records_per_s": round(eos.rows_per_s),
            "plain_records_per_s": round(plain.rows_per_s),
            "ratio": r,
            "target": {"ratio": TARGET, "met": r >= TARGET},
            **figures,
            "paths": {"eos": eos.as_dict(), "plain": plain.as_dict()},
            "table": table.splitlines(),
            "setup": {
                **common.spark_setup(spark, args.shards),
                "eos_pipeline_size": args.pipeline_size,
                "plain_pipeline_size": 10_000,
                "records_server": "redis-server 7, no persistence, both paths",
                "catalog": "the services' Redis (separate server), the sink's default dedup",
                "rows_schema": common.ROWS_SCHEMA,
            },
            "machine": common.machine_with_load(load_start),
            "versions": common.versions("pyspark", "pyarrow", "redis"),
        }
        common.save_results(args, result)
        return result
    finally:
        spark.stop()
        server.stop()


def main(args: argparse.Namespace) -> int:
    return common.exit_code(
        run,
        args,
        failure_prefix="bench redis",
        fail_on_miss=args.fail_on_target,
    )


def cli(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.redis_sink", description=(__doc__ or "").split("\n\n")[0]
    )
    add_arguments(parser)
    return main(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(cli())
