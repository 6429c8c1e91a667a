"""``python -m bench table``: one table of every benchmark's ratio against its target.

Reads the results files only (bench/results/*.json, as each benchmark wrote them) and prints
one line per figure: the benchmark, what is compared, the measured value, the target
(``>= x`` or ``<= x``), and met / NOT MET. A figure without a target (informational) shows
``-``; a results file that is missing shows one ``missing`` line, so a table never hides a
benchmark that did not run. Runs no benchmark; ``make bench`` calls it last.
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.common import RESULTS_DIR, read_results

# The results files in the order of the table (bench/results/<name>.json).
BENCHMARKS = (
    "postgres",
    "dedup",
    "kafka",
    "buffer",
    "elasticsearch",
    "opensearch",
    "redis",
    "recovery",
    "cluster",
    "session_start",
)


@dataclass(frozen=True)
class Row:
    """One figure: ``measured`` against ``target`` in ``direction`` ('>=' or '<='), or none."""

    benchmark: str
    figure: str
    measured: float | None
    target: float | None = None
    direction: str = ">="
    unit: str = "x"

    @property
    def status(self) -> str:
        if self.measured is None or (
            isinstance(self.measured, float) and math.isnan(self.measured)
        ):
            return "missing"
        if self.target is None:
            return "-"
        if self.direction == ">=":
            return "met" if self.measured >= self.target else "NOT MET"
        return "met" if self.measured <= self.target else "NOT MET"

    @property
    def target_text(self) -> str:
        return "-" if self.target is None else f"{self.direction} {self.target:g}{self.unit}"

    @property
    def measured_text(self) -> str:
        if self.measured is None:
            return "-"
        if self.unit == "x":
            return f"{self.measured:.3f}x"
        return f"{self.measured:,.3g}{self.unit}"


def _get(data: dict[str, Any], *path: str) -> float | None:
    """The number at ``path`` in ``data``; None when any step is missing."""
    node: Any = data
    for key in path:
        if not isinstance(node, dict) or key not in node:
            return None
        node = node[key]
    if isinstance(node, bool) or not isinstance(node, (int, float)):
        return None
    return float(node)


def postgres_rows(d: dict[str, Any]) -> Iterator[Row]:
    for name, label in (
        ("eos_vs_spark_jdbc", "ours / Spark JDBC writer"),
        ("eos_vs_raw_copy", "ours / plain COPY"),
    ):
        measured = _get(d, "targets", name, "measured") or _get(d, name)
        yield Row("postgres", label, measured, _get(d, "targets", name, "target"))
    yield Row(
        "postgres", "format('exactlyonce') / foreachBatch", _get(d, "format_vs_foreach_batch")
    )


def dedup_rows(d: dict[str, Any]) -> Iterator[Row]:
    yield Row("dedup", "ours / Spark dropDuplicates", _get(d, "ours_vs_spark_dedup"), 2.0)
    cost = _get(d, "dedup_cost")
    yield Row("dedup", "dedup cost, unique input (1 - on/off)", cost, 0.15, "<=", "")
    yield Row("dedup", "Bloom IDs/s (millions)", _scaled(_get(d, "bloom_ids_per_s")), 1.0, ">=", "")
    yield Row("dedup", "Bloom bytes/ID", _get(d, "bloom_bytes_per_id"), 2.0, "<=", "")
    yield Row("dedup", "Redis bytes/ID", _get(d, "redis_bytes_per_id"), 64.0, "<=", "")


def _scaled(value: float | None, by: float = 1e6) -> float | None:
    return None if value is None else value / by


def kafka_rows(d: dict[str, Any]) -> Iterator[Row]:
    yield Row("kafka", "ours / idempotent producer", _get(d, "ratio"), _get(d, "target_ratio"))
    yield Row(
        "kafka",
        "ours / Spark's Kafka sink",
        _get(d, "ratio_vs_spark"),
        _get(d, "target_ratio_vs_spark"),  # 1.0 (issue 34); absent in older results
    )
    # Not kafka.json's buffer figures: `make bench` runs `kafka --no-buffer`, which keeps
    # an earlier run's; the buffer benchmark measures PostgreSQL's behind the buffer.


def _buffer_pair(benchmark: str, sink: str, f: dict[str, Any]) -> Iterator[Row]:
    prefix = f"{sink}: " if sink else ""
    yield Row(
        benchmark,
        f"{prefix}p99 batch, slow sink behind buffer / fast sink",
        _get(f, "buffered_vs_fast_p99"),
        _get(f, "target_buffered_vs_fast_p99") or 1.2,
        "<=",
    )
    yield Row(
        benchmark,
        f"{prefix}drainer / direct sink",
        _get(f, "drain_vs_direct"),
        _get(f, "target_drain_vs_direct") or 0.8,
    )


def buffer_rows(d: dict[str, Any]) -> Iterator[Row]:
    sinks = d.get("sinks") or {}
    if not sinks:
        yield Row("buffer", "no sink measured", None)
    for sink, figures in sinks.items():
        yield from _buffer_pair("buffer", sink, figures)


def ratio_and_target_rows(name: str, label: str) -> Callable[[dict[str, Any]], Iterator[Row]]:
    def rows(d: dict[str, Any]) -> Iterator[Row]:
        yield Row(name, label, _get(d, "ratio"), _get(d, "target", "ratio"))

    return rows


def recovery_rows(d: dict[str, Any]) -> Iterator[Row]:
    target = _get(d, "target", "extra_s_at_most")
    curve = d.get("curve") or []
    if not curve:
        yield Row("recovery", "no catalog size measured", None)
    anchor = _get(d, "target", "extra_vs_plain_copy_s_at_most")
    if anchor is not None:  # issue 34: the plain COPY restart is the anchor
        for point in curve:
            ids = int(point.get("catalog_ids", 0))
            yield Row(
                "recovery",
                f"start to first write, ours - plain COPY's, {ids:,} IDs",
                _get(point, "extra_vs_plain_copy_s"),
                anchor,
                "<=",
                " s",
            )
        if len(curve) > 1:
            yield Row(
                "recovery",
                "spread of that difference between sizes",
                _get(d, "target", "extra_vs_plain_copy_spread_between_sizes_s"),
                _get(d, "target", "spread_s_at_most"),
                "<=",
                " s",
            )
    for point in curve:  # issue 17's anchor; context only once the plain COPY is the anchor
        ids = int(point.get("catalog_ids", 0))
        yield Row(
            "recovery",
            f"start to first write, ours - Spark's, {ids:,} IDs",
            _get(point, "extra_s"),
            target if anchor is None else None,
            "<=",
            " s",
        )
    spread = _get(d, "target", "extra_spread_between_sizes_s")
    if len(curve) > 1:
        label = "spread of ours - Spark's between sizes"
        yield Row(
            "recovery",
            label if anchor is not None else "spread of that difference between sizes",
            spread,
            None,
            "<=",
            " s",
        )
    for point in curve:
        ids = int(point.get("catalog_ids", 0))
        if ids >= 10_000_000:
            yield Row(
                "recovery",
                f"catalog bytes/ID at {ids:,} IDs",
                _get(point, "catalog", "bytes_per_id"),
                64.0,
                "<=",
                "",
            )


def cluster_rows(d: dict[str, Any]) -> Iterator[Row]:
    for key, label in (("single_node", "1 Redis"), ("cluster_3_masters", "3-master cluster")):
        yield Row(
            "cluster",
            f"{label}: bytes/ID",
            _get(d, key, "memory", "catalog_bytes_per_id"),
            64.0,
            "<=",
            "",
        )
    yield Row("cluster", "marks, cluster / 1 Redis", _get(d, "cluster_vs_single_marks"))
    yield Row("cluster", "lookups, cluster / 1 Redis", _get(d, "cluster_vs_single_lookups"))


def session_start_rows(d: dict[str, Any]) -> Iterator[Row]:
    yield Row("session_start", "ready, archive / no archive", _get(d, "ready_time_ratio"))
    yield Row("session_start", "first job, archive / no archive", _get(d, "first_job_time_ratio"))


EXTRACTORS: dict[str, Callable[[dict[str, Any]], Iterator[Row]]] = {
    "postgres": postgres_rows,
    "dedup": dedup_rows,
    "kafka": kafka_rows,
    "buffer": buffer_rows,
    "elasticsearch": ratio_and_target_rows("elasticsearch", "ours / streaming_bulk"),
    "opensearch": ratio_and_target_rows("opensearch", "ours / streaming_bulk"),
    "redis": ratio_and_target_rows("redis", "ours / pipelined writes"),
    "recovery": recovery_rows,
    "cluster": cluster_rows,
    "session_start": session_start_rows,
}


def build_rows(results: dict[str, dict[str, Any]]) -> list[Row]:
    """Every figure of every benchmark, in :data:`BENCHMARKS` order; a missing file is one
    ``missing`` row."""
    rows: list[Row] = []
    for name in BENCHMARKS:
        data = results.get(name) or {}
        if not data:
            rows.append(Row(name, f"bench/results/{name}.json", None))
            continue
        rows.extend(EXTRACTORS[name](data))
    return rows


def format_table(rows: Sequence[Row], results: dict[str, dict[str, Any]] | None = None) -> str:
    """The rows as a fixed-width table with a count of targets met at the end."""
    header = ("benchmark", "figure", "measured", "target", "status")
    cells = [header] + [
        (r.benchmark, r.figure, r.measured_text, r.target_text, r.status) for r in rows
    ]
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
    lines = []
    for n, row in enumerate(cells):
        lines.append("  ".join(cell.ljust(widths[i]) for i, cell in enumerate(row)).rstrip())
        if n == 0:
            lines.append("  ".join("-" * w for w in widths))
    judged = [r for r in rows if r.status in ("met", "NOT MET")]
    met = sum(r.status == "met" for r in judged)
    missing = sum(r.status == "missing" for r in rows)
    lines.append(
        f"{met} of {len(judged)} targets met"
        + (f"; {missing} figure(s) missing" if missing else "")
        + (f" (results of {_dates(results)})" if results else "")
    )
    return "\n".join(lines)


def _dates(results: dict[str, dict[str, Any]]) -> str:
    dates = sorted({str(r.get("date", ""))[:10] for r in results.values() if r.get("date")})
    return ", ".join(dates) or "unknown dates"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench table", description=__doc__)
    parser.add_argument("--results-dir", type=Path, default=RESULTS_DIR)
    args = parser.parse_args(argv)
    results = {name: read_results(name, args.results_dir) for name in BENCHMARKS}
    print(format_table(build_rows(results), results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
