"""Shared helpers for the benchmarks: progress lines, timing, machine facts, results files.

Every benchmark writes one JSON file, ``bench/results/<name>.json``, holding the machine it
ran on, the library versions, the date, the row count and every figure it measured, and
prints a table of rows/s with ratios against the path being judged. Rates from one run are
noisy on a shared machine; compare ratios measured in the same run, not absolute numbers
across runs.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

PROJECT_ROOT = Path(__file__).resolve().parent.parent
RESULTS_DIR = PROJECT_ROOT / "bench" / "results"
PARTITIONS = 2
ROWS_SCHEMA = "id string (32 hex chars), value bigint, note string (15 chars)"
T = TypeVar("T")

_STARTED = time.monotonic()


class BenchError(RuntimeError):
    """The benchmark cannot run, or a path wrote the wrong number of records."""


def progress(message: str) -> None:
    """One progress line to stderr, stamped with the seconds since the benchmark began."""
    print(f"[{time.monotonic() - _STARTED:7.1f}s] {message}", file=sys.stderr, flush=True)


def timed(fn: Callable[[], T]) -> tuple[float, T]:
    """Run ``fn`` once; return (wall seconds, its result)."""
    began = time.perf_counter()
    result = fn()
    return time.perf_counter() - began, result


@dataclass
class PathTiming:
    """The timed runs of one write path over the same rows."""

    name: str
    rows: int
    runs: list[float] = field(default_factory=list)
    details: list[dict[str, Any]] = field(default_factory=list)
    discarded: list[dict[str, Any]] = field(default_factory=list)

    def record(self, seconds: float, detail: dict[str, Any]) -> None:
        """Keep one timed run and what it reported."""
        self.runs.append(seconds)
        self.details.append(detail)

    @property
    def best(self) -> float:
        if not self.runs:
            raise ValueError(f"{self.name}: no timed run")
        return min(self.runs)

    @property
    def rows_per_s(self) -> float:
        return self.rows / self.best

    def as_dict(self) -> dict[str, Any]:
        return {
            "rows": self.rows,
            "best_seconds": round(self.best, 4),
            "rows_per_s": round(self.rows_per_s),
            "runs_seconds": [round(s, 4) for s in self.runs],
            "details": self.details,
            **({"discarded_runs": self.discarded} if self.discarded else {}),
        }


def ratio(numerator: float, denominator: float) -> float:
    return round(numerator / denominator, 3) if denominator else float("nan")


def print_table(paths: Sequence[PathTiming], judged: str, title: str = "") -> str:
    """Print (and return) rows/s per path and each path's ratio against ``judged``.

    The last column is ``judged / path``: above 1.0 the judged path is faster.
    """
    by_name = {p.name: p for p in paths}
    ref = by_name[judged].rows_per_s
    header = f"{'path':<24} {'rows':>10} {'best s':>9} {'rows/s':>12} {'vs ' + judged:>14}"
    lines = [title] if title else []
    lines += [
        f"(last column: {judged} rows/s / the path's rows/s; above 1.0 {judged} is faster)",
        header,
        "-" * len(header),
    ]
    for p in paths:
        vs = "1.000x" if p.name == judged else f"{ratio(ref, p.rows_per_s):.3f}x"
        lines.append(f"{p.name:<24} {p.rows:>10,} {p.best:>9.3f} {p.rows_per_s:>12,.0f} {vs:>14}")
    text = "\n".join(lines)
    print(text, flush=True)
    return text


def _cpu_model() -> str | None:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or None


def _memory_gib() -> float | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return round(int(line.split()[1]) / (1024 * 1024), 1)
    except (OSError, ValueError, IndexError):
        pass
    return None


def _os_release() -> str | None:
    try:
        for line in Path("/etc/os-release").read_text().splitlines():
            if line.startswith("PRETTY_NAME="):
                return line.split("=", 1)[1].strip('"')
    except OSError:
        pass
    return None


def spark_setup(spark: SparkSession, shards: int) -> dict[str, Any]:
    """The first keys of a results file's ``setup``: Spark's master, partitions, shards."""
    return {
        "spark_master": spark.sparkContext.master,
        "partitions": PARTITIONS,
        "eos_shards": shards,
    }


def load_average() -> float | None:
    """The machine's 1-minute load average, when the OS tells it."""
    try:
        return round(os.getloadavg()[0], 2)
    except OSError:
        return None


def machine_info() -> dict[str, Any]:
    return {
        "hostname": platform.node(),
        "os": _os_release() or platform.platform(),
        "kernel": platform.release(),
        "arch": platform.machine(),
        "cpu": _cpu_model(),
        "cores": os.cpu_count(),
        "memory_gib": _memory_gib(),
    }


def versions(*modules: str) -> dict[str, str | None]:
    """Python's version and each named module's ``__version__`` (None when not importable)."""
    out: dict[str, str | None] = {"python": platform.python_version()}
    for name in modules:
        try:
            module = __import__(name)
        except ImportError:
            out[name] = None
            continue
        out[name] = str(getattr(module, "__version__", None))
    return out


def now_utc() -> str:
    return dt.datetime.now(dt.timezone.utc).replace(microsecond=0).isoformat()


def write_results(name: str, data: dict[str, Any], directory: Path | None = None) -> Path:
    """Write ``<directory or bench/results>/<name>.json`` atomically; return its path."""
    directory = directory or RESULTS_DIR
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{name}.json"
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=False, default=str) + "\n")
    os.replace(tmp, path)
    return path


def machine_with_load(load_start: float | None) -> dict[str, Any]:
    """:func:`machine_info` with the load average when the benchmark began and now."""
    return {**machine_info(), "load_average_1m": {"start": load_start, "end": load_average()}}


def write_figures(
    name: str,
    run: Callable[[int, int], dict[str, Any]],
    args: argparse.Namespace,
    *packages: str,
) -> Path:
    """``run(args.rows, args.repeat)``'s figures as ``<args.results_dir>/<name>.json``, with
    the date, the machine (load average at the start and the end) and ``packages``' versions."""
    load_start = load_average()
    figures = run(args.rows, args.repeat)
    data = {
        "benchmark": name,
        "date": now_utc(),
        **figures,
        "machine": machine_with_load(load_start),
        "versions": versions(*packages),
    }
    return write_results(name, data, args.results_dir)


def read_results(name: str, directory: Path | None = None) -> dict[str, Any]:
    """The figures of ``<directory or bench/results>/<name>.json``; {} when absent or unreadable."""
    path = (directory or RESULTS_DIR) / f"{name}.json"
    if not path.exists():
        return {}
    try:
        return dict(json.loads(path.read_text()))
    except ValueError:
        return {}


# -- the command line ------------------------------------------------------------------------


def add_size_arguments(
    parser: argparse.ArgumentParser, *, rows: int, unit: str, repeat: int
) -> None:
    """``--rows``, ``--repeat``, ``--warmup-rows`` and ``--shards``, as every sink benchmark has."""
    parser.add_argument("--rows", type=int, default=rows, help=f"{unit} per path ({rows:,})")
    parser.add_argument("--repeat", type=int, default=repeat, help="timed runs per path; best wins")
    parser.add_argument("--warmup-rows", type=int, default=20_000, help="rows of the warm-up")
    parser.add_argument("--shards", type=int, default=2, help="the sink's shards (2)")


def add_results_arguments(parser: argparse.ArgumentParser, name: str) -> None:
    """``--results-name`` and ``--results-dir``: which results file the benchmark writes."""
    parser.add_argument(
        "--results-name", default=name, help=f"write bench/results/<name>.json ({name})"
    )
    add_results_dir_argument(parser)


def add_results_dir_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--results-dir",
        type=Path,
        default=RESULTS_DIR,
        help="where the results file goes (bench/results)",
    )


def add_fail_on_target_argument(parser: argparse.ArgumentParser, target: float) -> None:
    parser.add_argument(
        "--fail-on-target", action="store_true", help=f"exit 2 when eos/plain < {target}"
    )


def check_run_sizes(args: argparse.Namespace) -> None:
    if args.rows < 1 or args.repeat < 1 or args.warmup_rows < 1:
        raise BenchError("--rows, --repeat and --warmup-rows must be positive")


def save_results(args: argparse.Namespace, result: dict[str, Any]) -> Path:
    """Write ``result`` as ``--results-name`` under ``--results-dir``; say where."""
    path = write_results(args.results_name, result, args.results_dir)
    progress(f"wrote {path}")
    return path


def exit_code(
    run: Callable[[argparse.Namespace], dict[str, Any]],
    args: argparse.Namespace,
    *,
    failure_prefix: str,
    fail_on_miss: bool,
    targets_met: Callable[[dict[str, Any]], bool] | None = None,
) -> int:
    """0 when the benchmark ran, 1 when it failed, 2 when ``fail_on_miss`` and a target is
    not met (``targets_met``; by default the result's ``target.met``)."""
    try:
        result = run(args)
    except BenchError as exc:
        print(f"{failure_prefix}: {exc}", file=sys.stderr)
        return 1
    met = targets_met(result) if targets_met else bool(result["target"]["met"])
    if fail_on_miss and not met:
        return 2
    return 0


# -- services and Spark --------------------------------------------------------------------


def services_value(
    key: str, homes: Sequence[Path | None] = (PROJECT_ROOT / ".exactlyonce",)
) -> str | None:
    """``key`` from the environment, else from the first services file among ``homes`` that
    has it (written by ``python -m exactlyonce.integration.lab.services up``; None: the default
    place); None when none has it."""
    if os.environ.get(key):
        return os.environ[key]
    try:
        from exactlyonce.integration.envfile import service_env
    except ImportError:
        return None
    for home in homes:
        try:
            return service_env(home)[key]
        except (RuntimeError, KeyError):
            continue
    return None


def use_catalog_from_services() -> None:
    """Point the sinks' ID catalog (on by default) at the services' Redis, or refuse."""
    catalog_url = services_value("EXACTLYONCE_REDIS_URL")
    if not catalog_url:
        raise BenchError(
            "the sink's ID catalog needs the catalog's Redis: run "
            "`python -m exactlyonce.integration.lab.services up` or set EXACTLYONCE_REDIS_URL"
        )
    os.environ["EXACTLYONCE_REDIS_URL"] = catalog_url


def prepare_sink_run(args: argparse.Namespace) -> None:
    """What a sink benchmark checks and sets up before it starts Spark: sizes, the
    catalog's Redis, and ``bench`` importable by Spark's workers."""
    check_run_sizes(args)
    use_catalog_from_services()
    ensure_workers_import_bench()


def ensure_workers_import_bench() -> None:
    """Spark's Python workers unpickle the benchmarks' ``mapInArrow`` writers by reference:
    put ``bench`` on their path (they inherit the JVM's environment, which inherits ours)."""
    root = str(PROJECT_ROOT)
    paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    if root not in paths:
        os.environ["PYTHONPATH"] = os.pathsep.join([root, *paths])


def stop_process(proc: subprocess.Popen[Any]) -> None:
    """Terminate a server the benchmark started; kill it when it lingers."""
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


# -- the rows and the runs -----------------------------------------------------------------


def generate_rows(
    spark: SparkSession, n: int, start: int = 0, partitions: int = PARTITIONS
) -> DataFrame:
    """N deterministic rows ``(id string(32), value bigint, note string)`` from IDs ``start``
    on, in ``partitions`` partitions, cached and counted."""
    from pyspark.sql import functions as F

    key = F.col("id").cast("string")
    df = spark.range(start, start + n).select(
        F.md5(key).alias("id"),
        (F.col("id") * F.lit(2654435761) % F.lit(1_000_000_007)).alias("value"),
        F.concat(F.lit("note-"), F.substring(F.sha1(key), 1, 10)).alias("note"),
    )
    df = df.repartition(partitions).cache()
    counted = df.count()
    if counted != n:
        raise BenchError(f"generated {counted} rows, expected {n}")
    return df


def warm_then_timed(
    small: DataFrame, full: DataFrame, repeat: int
) -> list[tuple[str, DataFrame, bool]]:
    """(label, rows, timed) of an untimed warm-up on ``small``, then ``repeat`` timed runs."""
    return [("warm", small, False)] + [(f"run{i + 1}", full, True) for i in range(repeat)]


def sink_report_detail(sink: Any) -> dict[str, Any]:
    """The figures of the sink's last report (not its epoch), and whether dedup was on."""
    report = sink.last_report
    assert report is not None
    detail = {
        k: v
        for k, v in vars(report).items()
        if isinstance(v, (int, float)) and not isinstance(v, bool) and k != "epoch"
    }
    detail["dedup"] = sink.dedup_config is not None
    return detail


def delete_redis_keys(url: str, pattern: str) -> int:
    """Unlink the keys matching ``pattern``, 1,000 at a time; 0 when Redis is not there."""
    try:
        import redis
    except ImportError:
        return 0
    client = redis.Redis.from_url(url, socket_timeout=30)
    try:
        deleted = 0
        batch: list[bytes] = []
        for key in client.scan_iter(match=pattern, count=1000):
            batch.append(key)
            if len(batch) >= 1000:
                deleted += client.unlink(*batch)
                batch = []
        if batch:
            deleted += client.unlink(*batch)
        return deleted
    except redis.RedisError:
        return 0
    finally:
        client.close()


def forget_catalog(sink: Any) -> None:
    """Drop the keys of the sink's ID catalog, if it has one (every shard's, on any master)."""
    config = getattr(sink, "dedup_config", None)
    if config is None:
        return
    import redis

    from exactlyonce.dedup.catalog import RedisCatalog

    catalog = RedisCatalog(config, sink.query_name, sink.sink_name)
    try:
        catalog.drop()
    except redis.RedisError:
        pass  # no Redis, no catalog to forget
    finally:
        catalog.close()


def service(key: str) -> str:
    if os.environ.get(key):
        return os.environ[key]
    from exactlyonce.integration.envfile import service_env

    try:
        return service_env()[key]
    except RuntimeError as exc:
        raise BenchError(str(exc)) from None
