"""``python -m bench summary``: draw bench/results/summary.png from the results files only.

One panel per sink: our throughput beside each baseline measured in the same run (the
results file of that sink's benchmark) and, where the file has them, beside that run's two
ceilings (:mod:`bench.ceiling`: the same rows through a ``mapInArrow`` that only counts, the
"Python ceiling", and into Spark's ``noop`` sink), so "ours Nx" on a ceiling is the fraction
of it the sink reaches; and the buffer's p99 batch time (bench/results/buffer.json).
PostgreSQL has a second panel, its streaming runs: the sink through Spark's format API
(``format("exactlyonce")``) beside the same sink through ``foreachBatch``, so its "ours Nx"
is the format/foreachBatch ratio. A results file that is missing leaves its panel
out. Runs no benchmark; ``make bench`` calls it last.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench.common import RESULTS_DIR, read_results

OURS = "#1f6fb4"
NAMES = {"postgres": "PostgreSQL", "redis": "Redis", "elasticsearch": "Elasticsearch"}
BASELINE = "#a6a6a6"
CEILING = "#f0c36d"
PYTHON_CEILING = "Python ceiling (counting mapInArrow)"
NOOP_CEILING = "Spark noop sink (ceiling)"
# (label, rows/s) pairs, ours first; None when the results file lacks them.
Bars = list[tuple[str, float]]


def throughput_panels(results: dict[str, dict[str, Any]]) -> list[tuple[str, Bars]]:
    """(title, bars) per sink whose results file is there; ours is the first bar."""
    panels: list[tuple[str, Bars]] = []

    def add(
        title: str, bars: list[tuple[str, Any]], ceilings: dict[str, Any] | None = None
    ) -> None:
        if ceilings is not None and bars[0][1]:  # beside our rate only
            bars = bars + [
                (PYTHON_CEILING, ceilings.get("ceiling_python_rows_per_s")),
                (NOOP_CEILING, ceilings.get("ceiling_noop_rows_per_s")),
            ]
        kept = [(label, float(value)) for label, value in bars if value]
        if len(kept) >= 2:
            panels.append((title, kept))

    pg, kafka, redis, es, os_, dedup = (
        results.get(n, {})
        for n in ("postgres", "kafka", "redis", "elasticsearch", "opensearch", "dedup")
    )
    add(f"PostgreSQL ({pg.get('rows', 0):,} rows)", [
        ("PostgresSink", pg.get("eos_rows_per_s")),
        ("PostgresSink, dedup off", pg.get("eos_no_dedup_rows_per_s")),
        ("Spark JDBC", pg.get("spark_jdbc_rows_per_s")),
        ("raw COPY", pg.get("raw_copy_rows_per_s")),
    ], pg)  # fmt: skip
    stream = pg.get("stream") or {}
    add(f"PostgreSQL streaming, one micro-batch ({pg.get('rows', 0):,} rows)", [
        ("format('exactlyonce')", stream.get("eos_format_stream_rows_per_s")),
        ("foreachBatch(sink)", stream.get("eos_stream_rows_per_s")),
        ("raw COPY in foreachBatch", stream.get("raw_copy_stream_rows_per_s")),
    ])  # fmt: skip
    add(f"Kafka ({kafka.get('rows', 0):,} messages)", [
        ("KafkaSink", kafka.get("eos_msgs_per_s")),
        ("Spark Kafka sink", kafka.get("spark_kafka_sink_msgs_per_s")),
        ("idempotent producer", kafka.get("plain_msgs_per_s")),
    ], kafka)  # fmt: skip
    add(f"Redis ({redis.get('rows', 0):,} records)", [
        ("RedisSink", redis.get("eos_records_per_s")),
        ("pipelined writes", redis.get("plain_records_per_s")),
    ], redis)  # fmt: skip
    add(f"Elasticsearch ({es.get('rows', 0):,} docs, {es.get('server', '?')} server)", [
        ("ElasticsearchSink", es.get("eos_docs_per_s")),
        ("streaming_bulk", es.get("plain_docs_per_s")),
    ], es)  # fmt: skip
    add(f"OpenSearch ({os_.get('rows', 0):,} docs, OpenSearch {os_.get('server_version', '?')})", [
        ("OpenSearchSink", os_.get("eos_docs_per_s")),
        ("streaming_bulk", os_.get("plain_docs_per_s")),
    ], os_)  # fmt: skip
    add(f"Dedup end to end ({dedup.get('rows', 0):,} rows)", [
        ("dedup on", dedup.get("e2e_dedup_on_rows_per_s")),
        ("dedup off", dedup.get("e2e_dedup_off_rows_per_s")),
        ("Spark dropDuplicates", dedup.get("spark_dedup_rows_per_s")),
    ], dedup)  # fmt: skip
    for sink, figures in results.get("buffer", {}).get("sinks", {}).items():
        add(f"Buffer drainer vs. writing directly: {NAMES.get(sink, sink)}", [
            ("drainer", figures.get("drain_rows_per_s")),
            ("direct sink", figures.get("direct_rows_per_s")),
        ])  # fmt: skip
    return panels


def p99_rows(buffer: dict[str, Any]) -> list[tuple[str, float, float, float]]:
    """(sink, fast p99, slow unbuffered p99, slow buffered p99) in seconds."""
    return [
        (
            NAMES.get(sink, sink),
            f["fast_batch_p99_s"],
            f["slow_unbuffered_batch_p99_s"],
            f["slow_buffered_batch_p99_s"],
        )
        for sink, f in buffer.get("sinks", {}).items()
        if "slow_buffered_batch_p99_s" in f
    ]


def latency_rows(realtime: dict[str, Any]) -> list[tuple[str, float, float]]:
    """(path, p50, p99) in seconds of ``bench realtime``'s paths, in the file's order."""
    return [
        (path, f["p50_s"], f["p99_s"])
        for path, f in realtime.get("paths", {}).items()
        if "p50_s" in f and "p99_s" in f
    ]


def draw(results: dict[str, dict[str, Any]], out: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = throughput_panels(results)
    p99 = p99_rows(results.get("buffer", {}))
    latency = latency_rows(results.get("realtime", {}))
    columns = 2
    rows = (len(panels) + 1) // columns + (1 if p99 else 0) + (1 if latency else 0)
    fig = plt.figure(figsize=(13, 2.3 * rows + 1.2), layout="constrained")
    grid = fig.add_gridspec(rows, columns)
    for i, (title, bars) in enumerate(panels):
        _throughput(fig.add_subplot(grid[i // columns, i % columns]), title, bars)
    if p99:
        _p99(fig.add_subplot(grid[rows - 1 - (1 if latency else 0), :]), p99)
    if latency:
        _latency(fig.add_subplot(grid[rows - 1, :]), latency)
    dates = sorted({str(r.get("date", ""))[:10] for r in results.values() if r.get("date")})
    fig.suptitle(
        "exactlyonce (blue) vs. baselines (grey) and ceilings (yellow) of the same run: rows/s,"
        " higher is better; (ours Nx) = our rate / that rate"
        + (f"\nresults of {', '.join(dates)} (bench/results/*.json)" if dates else ""),
        fontsize=13,
    )
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def _throughput(ax: Any, title: str, bars: Bars) -> None:
    labels = [label for label, _ in bars][::-1]
    values = [value for _, value in bars][::-1]
    ceilings = [label in (PYTHON_CEILING, NOOP_CEILING) for label in labels]
    colours = [CEILING if ceiling else BASELINE for ceiling in ceilings]
    colours[-1] = OURS
    # Beside its ceilings a sink can be 50x below them: a log scale keeps every bar readable.
    log = any(ceilings)
    top, bottom = max(values), min(values)
    left = bottom / 3 if log else 0
    ax.barh(labels, [v - left for v in values], left=left, color=colours, height=0.6)
    for y, value in enumerate(values):
        ratio = f"  (ours {_times(values[-1] / value)}x)" if y != len(values) - 1 else ""
        x = value * 1.08 if log else value + top * 0.01
        ax.text(x, y, f"{value:,.0f}{ratio}", va="center", fontsize=9)
    if log:
        ax.set_xscale("log")
        ax.set_xlim(left, top * 12)
        title += ", log scale"
    else:
        ax.set_xlim(0, top * 1.35)
    ax.set_title(title, fontsize=11, loc="left")
    ax.tick_params(axis="y", labelsize=9)
    ax.tick_params(axis="x", labelsize=8)
    ax.xaxis.set_major_formatter(_thousands())
    ax.xaxis.set_minor_formatter(_blank())
    ax.spines[["top", "right"]].set_visible(False)


def _p99(ax: Any, rows: list[tuple[str, float, float, float]]) -> None:
    series = (
        ("fast sink", 1, "#7fbf7f"),
        ("slow sink, no buffer", 2, "#d9534f"),
        ("slow sink behind the buffer", 3, OURS),
    )
    width = 0.26
    top = max(max(row[1:]) for row in rows)
    for offset, (label, column, colour) in enumerate(series):
        xs = [i + (offset - 1) * width for i in range(len(rows))]
        values = [row[column] for row in rows]
        ax.bar(xs, values, width, label=label, color=colour)
        for x, value in zip(xs, values, strict=True):
            ax.text(x, value + top * 0.02, f"{value:.2f} s", ha="center", fontsize=9)
    ax.set_ylim(0, top * 1.25)
    ax.set_xticks(range(len(rows)), [row[0] for row in rows])
    ax.set_ylabel("p99 batch time (s)")
    ax.set_title(
        "Buffer: p99 micro-batch time of the Spark query in front of a slow sink (lower is better)",
        fontsize=11,
        loc="left",
    )
    ax.legend(loc="upper right", fontsize=9, ncols=3, frameon=False)
    ax.grid(axis="y", alpha=0.3)
    ax.spines[["top", "right"]].set_visible(False)


def _latency(ax: Any, rows: list[tuple[str, float, float]]) -> None:
    """Real-time Mode: p50 and p99 end-to-end latency per path (lower is better)."""
    width = 0.38
    top = max(row[2] for row in rows)
    for offset, (label, column, colour) in enumerate((("p50", 1, "#7fbf7f"), ("p99", 2, OURS))):
        xs = [i + (offset - 0.5) * width for i in range(len(rows))]
        values = [row[column] for row in rows]
        ax.bar(xs, values, width, label=label, color=colour)
        for x, value in zip(xs, values, strict=True):
            ax.text(x, value + top * 0.02, f"{value:.2f}", ha="center", fontsize=8)
    ax.set_ylim(0, top * 1.25)
    ax.set_xticks(range(len(rows)), [row[0] for row in rows], fontsize=8)
    ax.set_ylabel("seconds, sent to visible")
    ax.set_title(
        "Real-time Mode latency (lower is better): rtm_<transport>_arrival = floor of any "
        "Python writer; spark_rtm_kafka = Spark's own sink",
        fontsize=11,
        loc="left",
    )
    ax.legend(loc="upper right", fontsize=9, ncols=2, frameon=False)
    ax.grid(axis="y", alpha=0.3)
    ax.spines[["top", "right"]].set_visible(False)


def _times(ratio: float) -> str:
    """A ratio to two decimals, or two significant digits below 0.1 (a sink far below a
    ceiling)."""
    return f"{ratio:.2f}" if ratio >= 0.1 else f"{ratio:.2g}"


def _blank() -> Any:
    from matplotlib.ticker import NullFormatter

    return NullFormatter()


def _thousands() -> Any:
    from matplotlib.ticker import FuncFormatter

    return FuncFormatter(lambda value, _pos: f"{value / 1000:,.0f}k" if value else "0")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench summary", description=__doc__)
    parser.add_argument("--results-dir", type=Path, default=RESULTS_DIR)
    parser.add_argument("--out", type=Path, help="default: <results-dir>/summary.png")
    args = parser.parse_args(argv)
    names = (
        "postgres",
        "kafka",
        "redis",
        "elasticsearch",
        "opensearch",
        "dedup",
        "buffer",
        "realtime",
    )
    results = {name: read_results(name, args.results_dir) for name in names}
    out = draw(
        {k: v for k, v in results.items() if v}, args.out or args.results_dir / "summary.png"
    )
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
