"""What the machine can do with a benchmark's rows, measured in the same run as the sinks.

Ceilings (:func:`ceilings`): the same cached rows written

``noop``
    into Spark's ``noop`` sink: the JVM reads and drops them. No writer on Spark can beat it.
``python``
    through a ``mapInArrow`` that only counts: Spark hands every row to a Python worker as
    Arrow and gets one count back. No Python writer (ours, or a plain one) can beat it.

Each timed ``--repeat`` times, best run counted, interleaved with the paths they bound.

CPU (:class:`CpuMeter`): user + system CPU seconds, per timed run, of the benchmark's own
process tree (the driver, the Spark JVM, its Python workers) and of each named server's
process tree (the broker, PostgreSQL's postmaster and backends, Redis), from ``/proc``; the
benchmark's own tree also split into the driver, the JVM and the Python workers
(``spark_driver``, ``spark_jvm``, ``spark_python_workers``: where a sink's CPU goes beside
its baseline's).
Reaped children count through their parent's ``cutime``/``cstime``. A server the benchmark
starts itself (a throwaway redis-server, the search server) is a child of the driver: named as
a server, its tree is taken out of ``spark``'s, so nothing counts twice. Reported per million
records (:func:`cpu_per_million`): steadier than throughput on a shared machine, and what a
user pays for. Linux only; elsewhere :class:`CpuMeter` reports nothing (``None``).
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from bench.common import PathTiming, ratio, timed

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame

PROC = Path("/proc")
T = TypeVar("T")


def _count_rows(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    import pyarrow as pa

    rows = sum(batch.num_rows for batch in batches)
    yield pa.RecordBatch.from_pydict({"n": pa.array([rows], pa.int64())})


def write_noop(df: DataFrame) -> int:
    """The rows into Spark's ``noop`` sink; returns the row count (asked separately: the
    sink reports none)."""
    df.write.format("noop").mode("overwrite").save()
    return -1


def count_in_python(df: DataFrame) -> int:
    """Every row handed to a Python worker as Arrow, counted there."""
    return sum(int(r["n"]) for r in df.mapInArrow(_count_rows, "n long").collect())


def ceiling_paths(rows: int) -> tuple[PathTiming, PathTiming]:
    return PathTiming("ceiling_noop", rows), PathTiming("ceiling_python", rows)


def time_ceilings(
    df: DataFrame, rows: int, noop: PathTiming, python: PathTiming, meter: CpuMeter
) -> None:
    """One timed run of each ceiling over ``df`` (``rows`` rows), recorded with its CPU."""
    seconds, _, cpu = timed_cpu(meter, lambda: write_noop(df))
    noop.record(seconds, {"cpu": cpu})
    seconds, counted, cpu = timed_cpu(meter, lambda: count_in_python(df))
    if counted != rows:
        raise RuntimeError(f"the Python ceiling counted {counted:,} rows of {rows:,}")
    python.record(seconds, {"cpu": cpu})


def timed_cpu(meter: CpuMeter, fn: Callable[[], T]) -> tuple[float, T, dict[str, float]]:
    """Run ``fn`` once: (wall seconds, its result, the CPU seconds ``meter`` saw meanwhile)."""
    with meter.measure() as cpu:
        seconds, result = timed(fn)
    return seconds, result, cpu


def ceiling_figures(
    noop: PathTiming, python: PathTiming, paths: Mapping[str, PathTiming]
) -> dict[str, Any]:
    """The ceilings and each path as a fraction of them (best runs)."""
    out: dict[str, Any] = {
        "ceiling_noop_rows_per_s": round(noop.rows_per_s),
        "ceiling_python_rows_per_s": round(python.rows_per_s),
        "of_python_ceiling": {
            name: ratio(p.rows_per_s, python.rows_per_s) for name, p in paths.items()
        },
        "of_noop_ceiling": {
            name: ratio(p.rows_per_s, noop.rows_per_s) for name, p in paths.items()
        },
        "ceilings": {"noop": noop.as_dict(), "python": python.as_dict()},
    }
    return out


def _cpu_of(pid: int) -> tuple[int, float] | None:
    """(parent pid, CPU seconds of the process and its reaped children), None if gone."""
    try:
        text = (PROC / str(pid) / "stat").read_text()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2 :].split()
    # after the name: state, ppid, ... utime (11), stime, cutime, cstime (14), 0-based here
    ticks = sum(int(x) for x in fields[11:15])
    return int(fields[1]), ticks / os.sysconf("SC_CLK_TCK")


# The parts of the benchmark's own tree: this process, the JVM(s), everything else there (the
# Python workers and their daemon). A process reaped meanwhile counts in its parent's part.
SPARK_PARTS = ("driver", "jvm", "python_workers")


def _spark_part(pid: int) -> str:
    """Which of :data:`SPARK_PARTS` the process ``pid`` of the benchmark's tree is."""
    if pid == os.getpid():
        return "driver"
    try:
        name = (PROC / str(pid) / "comm").read_text().strip()
    except OSError:
        return "python_workers"
    return "jvm" if name == "java" else "python_workers"


def _processes() -> dict[int, tuple[int, float]]:
    out = {}
    for entry in PROC.iterdir() if PROC.is_dir() else ():
        if entry.name.isdigit():
            found = _cpu_of(int(entry.name))
            if found is not None:
                out[int(entry.name)] = found
    return out


def _trees(roots: Mapping[str, int], table: Mapping[int, tuple[int, float]]) -> dict[str, set[int]]:
    """Each root's tree; a root inside another's tree (a server the benchmark started itself)
    is taken out of that tree, so no process counts twice."""
    trees = {name: _tree(root, table) for name, root in roots.items()}
    for name, pids in trees.items():
        for other, root in roots.items():
            if other != name and root != roots[name] and root in pids:
                pids -= trees[other]
    return trees


def _tree(root: int, table: Mapping[int, tuple[int, float]]) -> set[int]:
    children: dict[int, list[int]] = {}
    for pid, (ppid, _) in table.items():
        children.setdefault(ppid, []).append(pid)
    found, todo = set(), [root]
    while todo:
        pid = todo.pop()
        if pid in table and pid not in found:
            found.add(pid)
            todo += children.get(pid, [])
    return found


@dataclass
class CpuMeter:
    """CPU seconds of process trees over a stretch of time: ``spark`` (this process and
    its descendants) and each of ``servers`` (name -> the root pid of its tree)."""

    servers: Mapping[str, int | None] = field(default_factory=dict)

    def _sample(self) -> dict[str, dict[int, float]] | None:
        if not PROC.is_dir():
            return None
        table = _processes()
        roots = {"spark": os.getpid(), **{k: v for k, v in self.servers.items() if v}}
        return {
            name: {pid: table[pid][1] for pid in pids}
            for name, pids in _trees(roots, table).items()
        }

    @contextmanager
    def measure(self) -> Iterator[dict[str, float]]:
        """Fills the yielded dict at exit: CPU seconds per tree, ``spark``'s split into its
        :data:`SPARK_PARTS` (``spark_driver``, ...: they sum to ``spark``), and ``total``
        (of the trees)."""
        used: dict[str, float] = {}
        before = self._sample()
        began = time.monotonic()
        yield used
        after = self._sample()
        if before is None or after is None:
            return
        parts = dict.fromkeys(SPARK_PARTS, 0.0)
        for name, pids in after.items():
            start = before.get(name, {})
            spent = {pid: cpu - start.get(pid, 0.0) for pid, cpu in pids.items()}
            used[name] = round(sum(spent.values()), 3)
            if name == "spark":
                for pid, cpu in spent.items():
                    parts[_spark_part(pid)] += cpu
        total = sum(used.values())
        used.update({f"spark_{part}": round(cpu, 3) for part, cpu in parts.items()})
        used["total"] = round(total, 3)
        used["wall"] = round(time.monotonic() - began, 3)


def cpu_per_million(paths: Mapping[str, PathTiming]) -> dict[str, dict[str, float] | None]:
    """Per path: the median run's CPU seconds per million records, per process tree and in
    total (``None`` where the runs recorded no CPU)."""
    out: dict[str, dict[str, float] | None] = {}
    for name, p in paths.items():
        runs = [d.get("cpu") for d in p.details if d.get("cpu")]
        if not runs:
            out[name] = None
            continue
        runs.sort(key=lambda cpu: cpu["total"])
        median = runs[len(runs) // 2]
        out[name] = {
            tree: round(seconds * 1_000_000 / p.rows, 2)
            for tree, seconds in median.items()
            if tree != "wall"
        }
    return out


def per_million_figures(
    runs: dict[str, list[tuple[float, dict[str, float]]]], rows: int
) -> dict[str, dict[str, Any]]:
    """Per path: its best rate, its median run's CPU seconds per million records per process
    tree, and every run's seconds."""
    out: dict[str, dict[str, Any]] = {}
    for name, timings in runs.items():
        cpus = [cpu for _, cpu in timings if cpu]
        per_million = {
            tree: round(statistics.median(c[tree] for c in cpus) * 1_000_000 / rows, 2)
            for tree in (cpus[0] if cpus else {})
            if tree != "wall"
        }
        out[name] = {
            "rows_per_s": round(rows / min(s for s, _ in timings)),
            "cpu_s_per_million": per_million or None,
            "runs_seconds": [round(s, 3) for s, _ in timings],
        }
    return out


def write_stage_profile(
    name: str,
    figures: dict[str, Any],
    started_load: float | None,
    modules: Sequence[str],
    results_dir: Path | None,
) -> Path:
    """A stage profile's results file (its :func:`per_million_figures` under ``paths``, the
    machine and the ``modules``' versions); each path's rate and CPU printed."""
    from bench.common import load_average, machine_info, now_utc, versions, write_results

    data = {
        "benchmark": name,
        "date": now_utc(),
        **figures,
        "machine": {**machine_info(), "load_average_1m": [started_load, load_average()]},
        "versions": versions(*modules),
    }
    path = write_results(name, data, results_dir)
    for path_name, p in figures["paths"].items():
        cpu = (p["cpu_s_per_million"] or {}).get("total")
        print(f"{path_name:<26} {p['rows_per_s']:>10,} rows/s  {cpu} CPU s / M records", flush=True)
    print(f"wrote {path}", flush=True)
    return path


@dataclass
class Ceilings:
    """A benchmark's two ceilings over its ``rows``, timed once a round beside its paths
    (:func:`time_ceilings`), and its figures once the rounds are over (:meth:`figures`)."""

    rows: int
    meter: CpuMeter
    noop: PathTiming = field(init=False)
    python: PathTiming = field(init=False)

    def __post_init__(self) -> None:
        self.noop, self.python = ceiling_paths(self.rows)

    def warm(self, df: DataFrame, rows: int) -> None:
        """An untimed round over ``df`` (``rows`` rows): nothing is kept."""
        time_ceilings(df, rows, *ceiling_paths(rows), self.meter)

    def time(self, df: DataFrame) -> None:
        """One timed round over ``df``, which holds :attr:`rows` rows."""
        time_ceilings(df, self.rows, self.noop, self.python, self.meter)

    def round(self, df: DataFrame, rows: int, timed_run: bool) -> None:
        """:meth:`time` for a timed round, else :meth:`warm`."""
        if timed_run:
            self.time(df)
        else:
            self.warm(df, rows)

    def figures(self, paths: Mapping[str, PathTiming]) -> dict[str, Any]:
        """:func:`ceiling_results` of ``paths`` against these ceilings."""
        return ceiling_results(self.noop, self.python, paths)


def ceiling_results(
    noop: PathTiming, python: PathTiming, paths: Mapping[str, PathTiming]
) -> dict[str, Any]:
    """``cpu_s_per_million`` (``paths`` and both ceilings) and :func:`ceiling_figures`."""
    return {
        "cpu_s_per_million": cpu_per_million(
            {**paths, "ceiling_python": python, "ceiling_noop": noop}
        ),
        **ceiling_figures(noop, python, paths),
    }


def service_pids(*names: str) -> dict[str, int | None]:
    """The local services' pids (``kafka``, ``postgres``, ``redis``) from their pid files
    under the services home; None for one that is not running here."""
    from importlib import import_module

    from exactlyonce.integration.envfile import home_dir

    home = home_dir()
    out: dict[str, int | None] = {}
    for name in names:
        module = import_module(f"exactlyonce.integration.lab.services.{name}")
        out[name] = module.pid(home)
    return out


# -- reading the figures back (bench summary, the docs' benchmarks page) ------------------

# Per throughput benchmark (its results file): the sink, its path, and its baseline's path
# (what a user would pick instead: Spark's own writer where there is one, else a plain one).
JUDGED = {
    "postgres": ("PostgresSink", "eos", "spark_jdbc"),
    "kafka": ("KafkaSink", "eos", "spark"),
    "redis": ("RedisSink", "eos", "plain"),
    "elasticsearch": ("ElasticsearchSink", "eos", "plain"),
    "opensearch": ("OpenSearchSink", "eos", "plain"),
    "dedup": ("PostgresSink, dedup end to end", "dedup_on", "spark_dedup"),
}


@dataclass(frozen=True)
class PathFigures:
    """One path of a results file beside the ceilings: best rows/s, fractions, CPU/M."""

    path: str
    rows_per_s: float | None
    of_python: float | None
    of_noop: float | None
    cpu: Mapping[str, float] | None  # CPU s per million records, per tree and ``total``

    @property
    def cpu_total(self) -> float | None:
        return None if self.cpu is None else self.cpu.get("total")


def _rate(data: Mapping[str, Any], path: str) -> float | None:
    """The path's best rows/s: as recorded, else rows / its fastest run (under ``paths``, or
    ``e2e`` for the dedup benchmark's end-to-end variants)."""
    entry = (data.get("paths") or data.get("e2e") or {}).get(path) or {}
    if entry.get("rows_per_s"):
        return float(entry["rows_per_s"])
    runs, rows = entry.get("runs_seconds"), entry.get("rows", data.get("rows"))
    return rows / min(runs) if runs and rows else None


def path_figures(data: Mapping[str, Any]) -> list[PathFigures]:
    """Every path a results file reports against its ceilings, then the two ceilings
    themselves (``ceiling_python``, ``ceiling_noop``); [] for a file without ceilings."""
    python, noop = data.get("ceiling_python_rows_per_s"), data.get("ceiling_noop_rows_per_s")
    if not python or not noop:
        return []
    of_python, of_noop = data.get("of_python_ceiling") or {}, data.get("of_noop_ceiling") or {}
    cpu = data.get("cpu_s_per_million") or {}
    out = [
        PathFigures(name, _rate(data, name), fraction, of_noop.get(name), cpu.get(name))
        for name, fraction in of_python.items()
    ]
    out.append(
        PathFigures("ceiling_python", python, 1.0, ratio(python, noop), cpu.get("ceiling_python"))
    )
    out.append(PathFigures("ceiling_noop", noop, ratio(noop, python), 1.0, cpu.get("ceiling_noop")))
    return out


@dataclass(frozen=True)
class SinkCeilings:
    """A sink and its baseline beside the ceilings of the same run."""

    benchmark: str
    sink: str
    ours: PathFigures
    baseline: PathFigures
    python_rows_per_s: float
    noop_rows_per_s: float


def sink_ceilings(results: Mapping[str, Mapping[str, Any]]) -> list[SinkCeilings]:
    """Per throughput benchmark (:data:`JUDGED`) whose results file has ceilings: the sink
    and its baseline against them, in :data:`JUDGED`'s order."""
    out = []
    for name, (sink, ours, baseline) in JUDGED.items():
        data = results.get(name) or {}
        by_path = {p.path: p for p in path_figures(data)}
        if ours in by_path and baseline in by_path:
            out.append(
                SinkCeilings(
                    name,
                    sink,
                    by_path[ours],
                    by_path[baseline],
                    float(data["ceiling_python_rows_per_s"]),
                    float(data["ceiling_noop_rows_per_s"]),
                )
            )
    return out
