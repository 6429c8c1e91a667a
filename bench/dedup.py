"""Dedup benchmark: Bloom filter + Redis catalog, against Spark's own stateful dedup.

``python -m bench.dedup --ids 1000000`` measures, in one run:

- the Bloom filter alone, per backend (numpy, rbloom, pybloom-live): IDs checked per second;
- the task-side dedup path (Bloom + batched catalog confirmation + marking after commit) over
  1,000,000 IDs with 0% and 20% duplicates, in IDs per second, on one core;
- the PostgreSQL sink end to end on 1,000,000 rows with 20% duplicates: dedup on, dedup off,
  and Spark's ``dropDuplicatesWithinWatermark`` (RocksDB state store) in front of our sink
  with dedup off; and on 1,000,000 unique rows, dedup on and off (``dedup_cost``). Each is a
  real ``availableNow`` streaming query (fresh table, query name and checkpoint) over Parquet
  files written once before any timing; every variant is warmed up on a small input, then
  timed ``--repeat`` rounds in rotated order, and its best round counts. Each round starts
  with the ceilings (:mod:`bench.ceiling`), the same query over the same 20%-duplicate files
  into a ``foreachBatch`` that writes to Spark's ``noop`` sink (``ceiling_noop``) or counts the
  rows in a ``mapInArrow`` (``ceiling_python``); every variant is reported as a fraction of
  both (``of_python_ceiling``, ``of_noop_ceiling``) and with its CPU seconds per million input
  rows (``cpu_s_per_million``: the Spark tree, PostgreSQL, the catalog's Redis);
- memory: Bloom filter bytes per ID at a 0.1% false-positive rate, Redis bytes per live ID.

Writes ``bench/results/dedup.json``.
"""

from __future__ import annotations

import argparse
import hashlib
import shutil
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from bench.ceiling import (
    CpuMeter,
    ceiling_results,
    count_in_python,
    service_pids,
    timed_cpu,
    write_noop,
)
from bench.common import (
    PathTiming,
    add_results_dir_argument,
    forget_catalog,
    load_average,
    machine_with_load,
    now_utc,
    progress,
    ratio,
    write_results,
)
from exactlyonce.dedup.bloom import BACKENDS, BloomSpec, ids_from_hex
from exactlyonce.dedup.catalog import DedupConfig, Layout, RedisCatalog
from exactlyonce.dedup.shard import DedupPlan, TaskDedup
from exactlyonce.integration.envfile import service_env

ARROW_BATCH = 10_000


def hex_ids(start: int, end: int) -> list[str]:
    return [hashlib.md5(str(i).encode()).hexdigest() for i in range(start, end)]


def bloom_rates(ids: np.ndarray) -> dict[str, float]:
    rates = {}
    for backend in BACKENDS:
        n = len(ids) if backend == "numpy" else min(len(ids), 200_000)
        spec = BloomSpec(len(ids), 0.001, backend)
        bloom = spec.empty()
        bloom.add(ids[: n // 2])
        began = time.perf_counter()
        for s in range(0, n, ARROW_BATCH):
            bloom.contains(ids[s : s + ARROW_BATCH])
        rates[backend] = n / (time.perf_counter() - began)
        progress(f"bloom {backend}: {rates[backend]:,.0f} IDs/s checked")
    return rates


def task_path_rate(redis_url: str, ids: np.ndarray, dup_fraction: float) -> dict[str, Any]:
    """One shard's dedup work for one epoch: keep() over Arrow-sized batches, then marks."""
    config = DedupConfig(redis_url, expected_ids=len(ids) * 2, retention_epochs=1000)
    query = f"bench-dedup-{dup_fraction}"
    catalog = RedisCatalog(config, query, "bench")
    layout = Layout.plan(config, 1)
    instance = catalog.create(layout)
    seen = int(len(ids) * dup_fraction)
    if seen:  # an earlier epoch wrote these; now they come again
        prior = TaskDedup(DedupPlan(config, query, "bench", instance, layout), 0)
        prior.remember_committed(np.zeros(seen, dtype=np.int64), ids[:seen])
        prior.after_commit()
    task = TaskDedup(DedupPlan(config, query, "bench", instance, layout), 1)
    shards = np.zeros(ARROW_BATCH, dtype=np.int64)
    began = time.perf_counter()
    kept = 0
    for s in range(0, len(ids), ARROW_BATCH):
        chunk = ids[s : s + ARROW_BATCH]
        kept += int(task.keep(shards[: len(chunk)], chunk).sum())
    checked = time.perf_counter() - began
    task.after_commit()
    total = time.perf_counter() - began
    stats = task.stats
    assert kept == len(ids) - seen, (kept, len(ids), seen)
    memory = catalog.memory_per_id(layout, 1)
    _clear(catalog)
    return {
        "dup_fraction": dup_fraction,
        "check_ids_per_s": round(len(ids) / checked),
        "check_and_mark_ids_per_s": round(len(ids) / total),
        "catalog_lookups": stats.catalog_lookups,
        "bloom_negatives": stats.bloom_negatives,
        "bloom_false_positives": stats.bloom_false_positives,
        "redis_bytes_per_id": memory,
    }


def _clear(catalog: RedisCatalog) -> None:
    catalog.drop()


# -- end to end, streaming -----------------------------------------------------------------

# name: (our dedup on, Spark's dedup in front, input). ``dup`` holds 20% repeated IDs,
# ``unique`` the same number of rows with every ID distinct (the dedup-cost pair).
VARIANTS: dict[str, tuple[bool, bool, str]] = {
    "dedup_on": (True, False, "dup"),
    "dedup_off": (False, False, "dup"),
    "spark_dedup": (False, True, "dup"),
    "unique_dedup_on": (True, False, "unique"),
    "unique_dedup_off": (False, False, "unique"),
}
DUP_FRACTION = 0.2
WARMUP_ROWS = 20_000


def write_input(spark: Any, rows: int, dup_fraction: float, path: Path) -> int:
    """Parquet files of (event_id, amount, ts) where ``dup_fraction`` of rows repeat an ID."""
    from pyspark.sql import functions as F

    unique = int(rows * (1 - dup_fraction))
    df = spark.range(rows).select(
        F.md5(F.pmod(F.col("id"), F.lit(unique)).cast("string")).alias("event_id"),
        (F.col("id") % 1000).alias("amount"),
        F.lit("2026-01-01 00:00:00").cast("timestamp").alias("ts"),
    )
    df.repartition(8).write.mode("overwrite").parquet(str(path))
    return unique


def stream(
    spark: Any, path: Path, sink: Any, checkpoint: Path, spark_dedup: bool, meter: CpuMeter
) -> tuple[float, dict[str, float]]:
    """One availableNow query of the files into ``foreachBatch(sink)``: seconds and CPU."""
    source = spark.readStream.schema("event_id STRING, amount BIGINT, ts TIMESTAMP").parquet(
        str(path)
    )
    if spark_dedup:
        source = source.withWatermark("ts", "10 minutes").dropDuplicatesWithinWatermark(
            ["event_id"]
        )

    def run() -> None:
        query = (
            source.writeStream.foreachBatch(sink)
            .option("checkpointLocation", str(checkpoint))
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination()

    seconds, _, cpu = timed_cpu(meter, run)
    return seconds, cpu


def _inputs(spark: Any, rows: int, work: Path) -> dict[str, tuple[Path, int]]:
    """Every input once, before any timing: the same files for every variant and round."""
    inputs = {}
    for name, fraction in (("dup", DUP_FRACTION), ("unique", 0.0)):
        for size, label in ((WARMUP_ROWS, f"warm-{name}"), (rows, name)):
            inputs[label] = (work / label, write_input(spark, size, fraction, work / label))
    return inputs


CEILINGS = ("ceiling_noop", "ceiling_python")


def _run_ceiling(
    spark: Any, name: str, source: Path, rows: int, work: Path, meter: CpuMeter
) -> tuple[float, dict[str, float]]:
    """One fresh query over ``source`` (``rows`` rows) into a ceiling: Spark's ``noop``
    sink, or a ``mapInArrow`` that counts (checked)."""
    counted: list[int] = []

    def each_batch(df: Any, epoch: int) -> None:
        counted.append(write_noop(df) if name == "ceiling_noop" else count_in_python(df))

    seconds, cpu = stream(
        spark, source, each_batch, work / f"ckpt-{name}-{time.time_ns()}", False, meter
    )
    if name == "ceiling_python" and sum(counted) != rows:
        raise RuntimeError(f"{name}: counted {sum(counted):,} rows of {rows:,}")
    return seconds, cpu


def _run_variant(
    spark: Any,
    dsn: str,
    redis_url: str,
    name: str,
    source: tuple[Path, int],
    work: Path,
    meter: CpuMeter,
) -> tuple[float, dict[str, float]]:
    """One fresh query (new table, query name, checkpoint) of variant ``name`` over
    ``source``; checks the table holds each distinct ID once."""
    from exactlyonce.connectors import PostgresSink

    dedup, spark_dedup, _ = VARIANTS[name]
    path, unique = source
    table = f"bench_dedup_{name}"
    _drop(dsn, table)
    run = time.time_ns()
    sink = PostgresSink(
        dsn,
        table,
        ["event_id"],
        f"bench-dedup-{name}-{run}",
        shards=2,
        **({"redis_url": redis_url} if dedup else {"dedup": False}),
    )
    try:
        seconds, cpu = stream(spark, path, sink, work / f"ckpt-{name}-{run}", spark_dedup, meter)
        count = _count(dsn, table)
        assert count == unique, f"{name}: {count} rows, expected {unique}"
    finally:
        _drop(dsn, table)
        forget_catalog(sink)
    return seconds, cpu


def _rounds(
    spark: Any, dsn: str, redis_url: str, inputs: dict[str, Any], rows: int, repeat: int, work: Path
) -> dict[str, PathTiming]:
    """Warm every variant and ceiling up on a small input, then time ``repeat`` rounds: the
    ceilings first, then the variants in an order rotated each round so that no variant
    always runs first (or last)."""
    meter = CpuMeter(service_pids("postgres", "redis"))
    names = list(VARIANTS)
    for name in CEILINGS:
        _run_ceiling(spark, name, inputs["warm-dup"][0], WARMUP_ROWS, work, meter)
    for name in names:
        _run_variant(spark, dsn, redis_url, name, inputs[f"warm-{VARIANTS[name][2]}"], work, meter)
    progress(f"warmed up: {', '.join([*CEILINGS, *names])} on {WARMUP_ROWS:,} rows each")
    runs = {n: PathTiming(n, rows) for n in (*CEILINGS, *names)}
    for r in range(repeat):
        order = names[r % len(names) :] + names[: r % len(names)]
        for name in (*CEILINGS, *order):
            if name in CEILINGS:
                seconds, cpu = _run_ceiling(spark, name, inputs["dup"][0], rows, work, meter)
            else:
                source = inputs[VARIANTS[name][2]]
                seconds, cpu = _run_variant(spark, dsn, redis_url, name, source, work, meter)
            runs[name].record(seconds, {"cpu": cpu})
            progress(f"round {r + 1}, {name}: {rows / seconds:,.0f} input rows/s ({seconds:.1f}s)")
    return runs


def end_to_end(rows: int, dsn: str, redis_url: str, repeat: int = 2) -> dict[str, PathTiming]:
    from exactlyonce.integration.spark import session

    spark = session(
        "bench-dedup",
        extra={
            "spark.sql.streaming.stateStore.providerClass": (
                "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
            ),
            "spark.sql.shuffle.partitions": "2",
            "spark.ui.showConsoleProgress": "false",
        },
    )
    work = Path(tempfile.mkdtemp(prefix="bench-dedup-"))
    try:
        inputs = _inputs(spark, rows, work)
        progress(f"inputs: {rows:,} rows, {inputs['dup'][1]:,} distinct IDs; {rows:,} unique")
        runs = _rounds(spark, dsn, redis_url, inputs, rows, repeat, work)
    finally:
        spark.stop()
        shutil.rmtree(work, ignore_errors=True)
    return runs


def _drop(dsn: str, table: str) -> None:
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f'DROP TABLE IF EXISTS "{table}"')


def _count(dsn: str, table: str) -> int:
    import psycopg

    with psycopg.connect(dsn) as conn:
        row = conn.execute(f'SELECT count(*) FROM "{table}"').fetchone()
    return int(row[0]) if row else 0


def e2e_figures(runs: dict[str, PathTiming], repeat: int) -> dict[str, Any]:
    """The judged figures: ours against Spark's dedup on the 20%-duplicate input, and the
    cost of dedup on unique input (each variant's best of ``repeat`` rounds); every variant
    against the ceilings, and its CPU."""
    variants = {name: runs[name] for name in VARIANTS}
    e2e = {
        name: {
            "seconds": round(p.best, 3),
            "rows_per_s": round(p.rows_per_s),
            "runs_seconds": [round(s, 3) for s in p.runs],
            "input": VARIANTS[name][2],
            "details": p.details,
        }
        for name, p in variants.items()
    }
    rate = {name: e2e[name]["rows_per_s"] for name in e2e}
    noop, python = (runs[name] for name in CEILINGS)
    return {
        "e2e_dedup_on_rows_per_s": rate["dedup_on"],
        "e2e_dedup_off_rows_per_s": rate["dedup_off"],
        "spark_dedup_rows_per_s": rate["spark_dedup"],
        "e2e_unique_dedup_on_rows_per_s": rate["unique_dedup_on"],
        "e2e_unique_dedup_off_rows_per_s": rate["unique_dedup_off"],
        "dedup_cost": round(1 - rate["unique_dedup_on"] / rate["unique_dedup_off"], 3),
        "dedup_cost_on_duplicates": round(1 - rate["dedup_on"] / rate["dedup_off"], 3),
        "ours_vs_spark_dedup": ratio(rate["dedup_on"], rate["spark_dedup"]),
        "e2e_method": (
            f"every variant warmed up on {WARMUP_ROWS:,} rows, then {repeat} timed rounds in "
            "rotated order over the same Parquet files, best round counts; dedup_cost is on "
            "unique input"
        ),
        "e2e": e2e,
        **ceiling_results(noop, python, variants),
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.dedup", description=__doc__)
    parser.add_argument("--ids", type=int, default=1_000_000)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--skip-e2e", action="store_true")
    parser.add_argument(
        "--repeat", type=int, default=2, help="timed rounds end to end (the best counts)"
    )
    add_results_dir_argument(parser)
    args = parser.parse_args(argv)
    load_start = load_average()
    env = service_env()
    redis_url, dsn = env["EXACTLYONCE_REDIS_URL"], env["EXACTLYONCE_PG_DSN"]
    ids = ids_from_hex(hex_ids(0, args.ids))
    bloom = bloom_rates(ids)
    paths = [task_path_rate(redis_url, ids, f) for f in (0.0, 0.2)]
    for p in paths:
        progress(
            f"task path, {p['dup_fraction']:.0%} duplicates: {p['check_ids_per_s']:,} IDs/s "
            f"checked, {p['check_and_mark_ids_per_s']:,} IDs/s checked and marked"
        )
    e2e = {} if args.skip_e2e else end_to_end(args.rows, dsn, redis_url, args.repeat)
    spec = BloomSpec(1_000_000, 0.001)
    data: dict[str, Any] = {
        "date": now_utc(),
        "machine": machine_with_load(load_start),
        "ids": args.ids,
        "rows": args.rows,
        "bloom_ids_per_s": round(bloom["numpy"]),
        "bloom_ids_per_s_by_backend": {k: round(v) for k, v in bloom.items()},
        "bloom_plus_catalog": paths,
        "bloom_bytes_per_id": round(spec.empty().nbytes() / spec.capacity, 3),
        "redis_bytes_per_id": round(paths[1]["redis_bytes_per_id"] or 0, 1),
    }
    if e2e:
        data.update(e2e_figures(e2e, args.repeat))
    data["targets"] = {
        "bloom_at_least_1m_ids_per_s": data["bloom_ids_per_s"] >= 1_000_000,
        "bloom_at_most_2_bytes_per_id": data["bloom_bytes_per_id"] <= 2.0,
        "redis_at_most_64_bytes_per_id": 0 < data["redis_bytes_per_id"] <= 64,
        **(
            {
                "dedup_costs_at_most_15_percent": data["dedup_cost"] <= 0.15,
                "at_least_2x_spark_dedup": data["ours_vs_spark_dedup"] >= 2.0,
            }
            if e2e
            else {}
        ),
    }
    path = write_results("dedup", data, args.results_dir)
    for key, value in data.items():
        if key not in ("machine", "e2e", "bloom_plus_catalog"):
            print(f"{key}: {value}")
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
