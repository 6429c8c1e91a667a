"""Generate ``benchmarks.md`` from ``bench/results/*.json`` (run by mkdocs-gen-files).

The page holds no figure of its own: every number is read from the results files that
``make bench`` (and ``make soak``) write, so the page cannot drift from them. It shows

- the targets table (each figure against its target, met / NOT MET), built by
  ``bench.table`` exactly as ``python -m bench table`` prints it;
- the ceilings table: per sink, its rate and its baseline's beside the same run's ceilings
  (Spark's ``noop`` sink, a counting ``mapInArrow``), as fractions of them, with the CPU
  seconds per million records of each (``bench.ceiling``); per results file, every path so;
- per results file: its date, machine and load, and tables of the figures it holds
  (rates, ratios, targets), nested sections flattened to dotted names;
- the soak's fault matrix (``chaos.json``);
- ``summary.png``, copied into the built site (not into ``docs/``).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
PAGE = "benchmarks.md"
PICTURE = "summary.png"

# Keys that are bookkeeping, not figures (where a run's files went, per-run raw lists).
SKIP_KEYS = {"machine", "versions", "results_dir", "table", "details", "runs", "dsn", "notes"}
TITLES = {
    "postgres": "PostgreSQL sink",
    "dedup": "Dedup (Bloom filter + Redis catalog)",
    "kafka": "Kafka sink",
    "kafka_stages": "Kafka sink: CPU per stage against Spark's sink",
    "postgres_stages": "PostgreSQL sink: CPU per stage against a plain COPY",
    "kafka_headers": "Kafka: what the per-record header costs a producer",
    "kafka_profile": "Kafka sink: where its CPU and a task's time go (JFR, py-spy)",
    "buffer": "Buffer and drainer, per sink",
    "elasticsearch": "Elasticsearch sink",
    "opensearch": "OpenSearch sink (genuine node)",
    "redis": "Redis sink",
    "recovery": "Recovery after 1,000 epochs",
    "cluster": "Dedup catalog on Redis Cluster",
    "session_start": "Spark session start (class-data archive)",
    "realtime": "Real-time Mode latency",
    "realtime_sparse": "Real-time Mode latency, sparse traffic (a row waits for the next)",
    "kafka_txn": "Kafka: how soon a transaction is visible, against a plain produce",
}


def load(path: Path) -> dict[str, Any]:
    data = json.loads(path.read_text())
    return data if isinstance(data, dict) else {}


def number(value: Any) -> str:
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        return f"{value:,.0f}" if abs(value) >= 1000 else f"{value:.4g}"
    text = str(value).replace("|", "\\|").replace("\n", " ")
    return text if len(text) <= 160 else text[:157] + "..."


def flatten(data: Any, prefix: str = "") -> Iterator[tuple[str, Any]]:
    """(dotted name, scalar) pairs; lists of numbers shown inline, other lists left out."""
    if isinstance(data, dict):
        for key, value in data.items():
            if key in SKIP_KEYS:
                continue
            name = f"{prefix}.{key}" if prefix else str(key)
            yield from flatten(value, name)
    elif isinstance(data, list):
        if data and all(isinstance(v, (int, float)) for v in data) and len(data) <= 12:
            yield prefix, ", ".join(number(v) for v in data)
    elif data is not None:
        yield prefix, data


def table(header: tuple[str, ...], rows: list[tuple[str, ...]]) -> list[str]:
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(row) + " |" for row in rows]
    return out + [""]


def machine_line(data: dict[str, Any]) -> str:
    m = data.get("machine") or {}
    parts = [str(data.get("date", "undated"))]
    if m:
        cores, memory = m.get("cores", "?"), m.get("memory_gib", "?")
        parts.append(f"{cores} cores, {memory} GiB, {m.get('os', '')}")
        load = m.get("load_average_1m")
        if isinstance(load, dict):
            parts.append(f"load average {load.get('start')} -> {load.get('end')}")
    versions = data.get("versions") or {}
    if versions:
        parts.append(", ".join(f"{k} {v}" for k, v in versions.items()))
    return "; ".join(parts)


def _import_bench() -> None:
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))


def fraction(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def cpu_text(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f} s"


def ceilings_section(results: dict[str, dict[str, Any]]) -> list[str]:
    """Per sink: its rate and its baseline's beside the ceilings of the same run."""
    _import_bench()
    from bench.ceiling import sink_ceilings

    sinks = sink_ceilings(results)
    if not sinks:
        return []
    out = [
        "## Ceilings and CPU { #ceilings }",
        "",
        "Each throughput benchmark also writes the same rows, in the same run, into Spark's",
        "`noop` sink (the JVM reads and drops them: no writer on Spark beats it) and through a",
        "`mapInArrow` that only counts them (every row handed to a Python worker as Arrow: no",
        "Python writer beats it). Each sink and its baseline are shown as a fraction of both",
        "ceilings, with the CPU seconds (user + system of the Spark JVM, its Python workers and",
        "the servers: database, broker, the catalog's Redis) they spent per million records,",
        "the median run's. CPU is steadier than throughput on a shared machine, but a",
        "server that other work on the machine uses too (the local services' PostgreSQL and",
        "Redis) counts that work as well; a server the benchmark starts (the records'",
        "redis-server, the search server) counts only the benchmark's. Each file's own table",
        "also splits the Spark tree (`spark`) into its driver, JVM and Python workers",
        "(`spark_driver`, `spark_jvm`, `spark_python_workers`, in results from 2026-12-02 on):",
        "where a sink's CPU goes beside its baseline's, which spends none in Python.",
        "",
    ]
    out += table(
        (
            "sink",
            "rows/s",
            "baseline",
            "baseline rows/s",
            "Python ceiling rows/s",
            "noop ceiling rows/s",
            "sink of Python ceiling",
            "baseline of Python ceiling",
            "sink of noop ceiling",
            "baseline of noop ceiling",
            "sink CPU / M records",
            "baseline CPU / M records",
        ),
        [
            (
                f"[{s.sink}](#{s.benchmark})",
                number(s.ours.rows_per_s),
                f"`{s.baseline.path}`",
                number(s.baseline.rows_per_s),
                number(s.python_rows_per_s),
                number(s.noop_rows_per_s),
                fraction(s.ours.of_python),
                fraction(s.baseline.of_python),
                fraction(s.ours.of_noop),
                fraction(s.baseline.of_noop),
                cpu_text(s.ours.cpu_total),
                cpu_text(s.baseline.cpu_total),
            )
            for s in sinks
        ],
    )
    return out


def path_ceilings_table(data: dict[str, Any]) -> list[str]:
    """Every path of one results file beside its ceilings, with CPU per process tree."""
    _import_bench()
    from bench.ceiling import path_figures

    figures = path_figures(data)
    if not figures:
        return []

    def trees(cpu: Any) -> str:
        if not cpu:
            return "-"
        return ", ".join(f"{k} {v:.1f}" for k, v in cpu.items() if k != "total")

    rows = [
        (
            f"`{p.path}`",
            number(p.rows_per_s),
            fraction(p.of_python),
            fraction(p.of_noop),
            cpu_text(p.cpu_total),
            trees(p.cpu),
        )
        for p in figures
    ]
    header = (
        "path",
        "rows/s",
        "of Python ceiling",
        "of noop ceiling",
        "CPU / M records",
        "CPU s / M records per process tree",
    )
    return ["Beside the ceilings of the same run:", "", *table(header, rows)]


def targets_section(results: dict[str, dict[str, Any]]) -> list[str]:
    _import_bench()
    from bench.table import BENCHMARKS, build_rows, format_table

    known = {name: results.get(name, {}) for name in BENCHMARKS}
    rows = build_rows(known)
    out = [
        "## Targets",
        "",
        "Each figure against its target, as `python -m bench table` prints it (built by",
        "`bench.table` from the same files). Ratios are measured side by side in one run;",
        "read them, not the absolute rates, which depend on the machine and its load.",
        "",
    ]
    out += table(
        ("benchmark", "figure", "measured", "target", "status"),
        [
            (
                f"[{r.benchmark}](#{r.benchmark.replace('_', '-')})",
                r.figure,
                r.measured_text,
                r.target_text,
                f"**{r.status}**" if r.status == "NOT MET" else r.status,
            )
            for r in rows
        ],
    )
    summary = format_table(rows, known).splitlines()[-1]
    return out + [summary, ""]


def file_section(name: str, data: dict[str, Any]) -> list[str]:
    out = [f"## {TITLES.get(name, name)} {{ #{name.replace('_', '-')} }}", ""]
    out += [f"`bench/results/{name}.json`: {machine_line(data)}.", ""]
    for key in ("measure", "e2e_method", "server_detail"):
        if isinstance(data.get(key), str):
            out += [f"*{key.replace('_', ' ')}:* {data[key]}", ""]
    prepared = data.get("table")
    if isinstance(prepared, list) and all(isinstance(line, str) for line in prepared):
        out += ["```text", *prepared, "```", ""]
    out += path_ceilings_table(data)
    rows = [(f"`{k}`", number(v)) for k, v in flatten(data) if k not in ("date", "benchmark")]
    out += ['??? note "Every figure in the file"', ""]
    out += ["    " + line if line else "" for line in table(("figure", "value"), rows)]
    for key in ("notes", "reading"):
        notes = data.get(key)
        if isinstance(notes, list):
            out += [f"- {n}" for n in notes if isinstance(n, str)] + [""]
    return out


def _soak_label(row: dict[str, Any], notes: dict[str, Any]) -> str:
    sink = str(row.get("sink"))
    return f"{sink} ({notes[sink]})" if sink in notes else sink


def _soak_faults(row: dict[str, Any], kinds: tuple[str, ...]) -> str:
    faults = " / ".join(str(row.get(k, 0)) for k in kinds)
    return f"{number(row.get('faults'))}: {faults}, {number(row.get('faults_missed'))} missed"


def _controlled_table(matrix: list[dict[str, Any]], notes: dict[str, Any]) -> list[str]:
    """Rows with the negative control: pipeline kills apart from server restarts, kills in
    the commit window, the independent reader's counts and the control's duplicates."""
    kinds = (
        "driver_kills", "point_kills", "commit_kills", "server_hard", "server_clean",
        "lost_replies", "refusals", "stalls", "worker_kills", "drainer_kills",
    )  # fmt: skip
    rows = [
        (
            _soak_label(row, notes),
            str(row.get("write_mode") or "-"),
            number(row.get("runs")),
            f"{number(row.get('pipeline_kills'))} ({number(row.get('fewest_pipeline_kills'))})",
            number(row.get("commit_window_kills")),
            f"{number(row.get('server_restarts'))} ({number(row.get('broker_failovers', 0))})",
            _soak_faults(row, kinds),
            number(row.get("ids")),
            number(row.get("duplicates")),
            number(row.get("missing")),
            f"{number(row.get('control_duplicates'))} "
            f"({number(row.get('fewest_control_duplicates'))})",
            f"{number(row.get('seconds'))} s",
            f"**{row.get('verdict')}**",
        )
        for row in matrix
    ]
    return table(
        (
            "sink",
            "mode",
            "runs",
            "pipeline kills (fewest in a seeded run)",
            "in the commit window",
            "server restarts (broker failovers)",
            "faults: driver / point / commit / server hard / clean / lost reply / refusal / "
            "stall / worker / drainer",
            "IDs",
            "duplicates (independent reader)",
            "missing",
            "control duplicates (fewest)",
            "time",
            "verdict",
        ),  # fmt: skip
        rows,
    )


def _sigkill_table(matrix: list[dict[str, Any]], notes: dict[str, Any]) -> list[str]:
    """Rows of a soak before the negative control: SIGKILLs (server restarts among them)."""
    kinds = (
        "driver_kills", "point_kills", "server_hard", "server_clean", "lost_replies",
        "refusals", "stalls", "worker_kills", "drainer_kills",
    )  # fmt: skip
    rows = [
        (
            _soak_label(row, notes),
            number(row.get("runs")),
            f"{number(row.get('sigkills'))} ({number(row.get('fewest_sigkills'))})",
            _soak_faults(row, kinds),
            number(row.get("ids")),
            number(row.get("duplicates")),
            number(row.get("missing")),
            f"{number(row.get('seconds'))} s",
            f"**{row.get('verdict')}**",
        )
        for row in matrix
    ]
    return table(
        (
            "sink",
            "runs",
            "SIGKILLs (fewest in a seeded run)",
            "faults: driver / point / server hard / clean / lost reply / refusal / stall / "
            "worker / drainer",
            "IDs",
            "duplicates",
            "missing",
            "time",
            "verdict",
        ),  # fmt: skip
        rows,
    )


def planned_cells(data: dict[str, Any]) -> list[tuple[str, int, str]]:
    """The full soak's cells (sink, seed, mode), as ``bench.soak`` plans them."""
    _import_bench()
    from bench.soak import FULL, SINKS, build_parser, plan

    seeds = int((data.get("full_parameters") or FULL)["seeds"])
    return plan(build_parser().parse_args(["--seeds", str(seeds), "--only", ",".join(SINKS)]))


def _coverage(data: dict[str, Any]) -> list[str]:
    """How much of the full soak this code has run, and which cells are still to run: the
    matrix sums only what ran."""
    full = planned_cells(data)
    from bench.soak_resume import key_of

    done = {key_of(c) for c in data.get("cells") or []}
    todo = [cell for cell in full if cell not in done]
    code = f"code `{data.get('fingerprint')}`"
    if not todo:
        return [f"All {len(full)} cells of the full soak ran on {code}.", "", *_since(data)]
    left: dict[str, list[str]] = {}
    for sink, seed, mode in todo:
        left.setdefault(sink, []).append(f"seed {seed}" if mode == "seed" else "the duration run")
    per_sink = len(full) // len({sink for sink, _, _ in full})
    untouched = [sink for sink, cells in left.items() if len(cells) == per_sink]
    partly = [
        f"{sink} ({', '.join(cells)})" for sink, cells in left.items() if sink not in untouched
    ]
    if untouched:
        partly.append(f"every cell of {', '.join(untouched)}")
    return [
        f"**Incomplete: {len(full) - len(todo)} of the full soak's {len(full)} cells have run "
        f"on {code}**; the rows below sum only those. Not run yet: " + "; ".join(partly) + ".",
        "",
        *_since(data),
    ]


def _since(data: dict[str, Any]) -> list[str]:
    """Whether the package in this checkout is the code the soak ran: a fingerprint of
    the files as they are now, compared with the one the cells recorded."""
    from bench.soak_resume import code_fingerprint

    theirs = data.get("fingerprint")
    if code_fingerprint(ROOT) == theirs:
        return [f"The package in this checkout is the code it ran (`{theirs}`).", ""]
    return [
        "**The package has changed since this soak ran**: the cells are evidence for code "
        f"`{theirs}`; what changed after it is in CHANGELOG.md, and `make soak` of the code "
        "as it is now runs the matrix again.",
        "",
    ]


def _cells_table(cells: list[dict[str, Any]]) -> list[str]:
    """One row per cell: what ran, what it survived, what the independent reader and the
    negative control found."""
    _import_bench()
    from bench.soak_report import cell_verdict

    rows = [
        (
            str(c.get("sink")),
            str(c.get("write_mode") or "-"),
            str(c.get("seed")) if c.get("mode") == "seed" else f"{c.get('seed')} (duration)",
            number(bool(c.get("cluster"))),
            number(c.get("ids")),
            f"{number(c.get('pipeline_kills'))} ({number(c.get('commit_window_kills'))})",
            number(c.get("worker_kills")),
            number(c.get("server_restarts")),
            number(c.get("faults_missed")),
            f"{number(c.get('duplicates'))} / {number(c.get('missing'))} / "
            f"{number(c.get('unexpected'))}",
            number(c.get("reader")),
            number(c.get("control_duplicates")),
            f"{number(c.get('wall_seconds'))} s",
            f"**{cell_verdict(c)}**",
        )
        for c in sorted(
            cells, key=lambda c: (str(c.get("sink")), str(c.get("mode")), int(c.get("seed") or 0))
        )
    ]
    return table(
        (
            "sink",
            "mode",
            "seed",
            "cluster",
            "IDs",
            "pipeline kills (in the commit window)",
            "worker kills",
            "server restarts",
            "faults missed",
            "duplicates / missing / unexpected",
            "independent reader",
            "control duplicates",
            "time",
            "verdict",
        ),
        rows,
    )


def soak_section(data: dict[str, Any]) -> list[str]:
    """The soak's matrix. Rows written since the negative control (``pipeline_kills``,
    ``control_duplicates``) get its columns; older rows (``sigkills``) the columns they had."""
    matrix = data.get("matrix") or []
    if not matrix:
        return []
    params = data.get("parameters") or {}
    dates = data.get("dates") or []
    controlled = any("pipeline_kills" in row for row in matrix)
    kills = "kills of the pipeline" if controlled else "SIGKILLs"
    out = [
        "## Soak: the fault matrix at scale { #soak }",
        "",
        f"`bench/results/chaos.json` (`make soak`): code fingerprint `{data.get('fingerprint')}`, "
        f"{len(data.get('cells') or [])} cell(s), {' to '.join(map(str, dates))}; per sink "
        f"{params.get('seeds')} seeded runs of {number(params.get('events'))} events with at least "
        f"{params.get('kills')} {kills} each, and one {number(params.get('duration'))} s run. "
        "How the soak runs: [Chaos, audit and soak](operations/chaos.md#soak).",
        "",
    ]
    if not controlled:
        out += [
            "**This matrix predates the strict soak and proves less than it seems.** It ran "
            "PostgreSQL and the buffer in `mode: insert`, Redis with `write: hash` and "
            "Elasticsearch with `op_type: create`, modes where a second write of a record "
            "is invisible; it audited with the project's own reader; it had no negative "
            "control; and its SIGKILLs count server restarts. The strict soak "
            "(`examples/soak/*.yaml` now: append, stream, index, a plain `read_committed` "
            "consumer, each with a control that must show duplicates) has not been run to "
            "the end yet.",
            "",
        ]
    notes = data.get("notes") or {}
    if controlled:
        out += _coverage(data)
    out += _controlled_table(matrix, notes) if controlled else _sigkill_table(matrix, notes)
    if controlled:
        out += ["Cell by cell:", ""] + _cells_table(data.get("cells") or [])
    stale = data.get("stale_cells") or []
    if stale:
        out += [
            f"{len(stale)} cells of earlier code are kept in the file as stale and are not "
            "summed here.",
            "",
        ]
    return out


def render() -> tuple[str, bytes | None]:
    results = {p.stem: load(p) for p in sorted(RESULTS.glob("*.json"))}
    picture = RESULTS / PICTURE
    out = [
        "# Benchmarks",
        "",
        "Generated from `bench/results/*.json` by `docs/gen_benchmarks.py` at every docs",
        "build. `make bench` (`python -m bench all`) runs every benchmark, each in its own",
        "process, writes these files and `summary.png`, and prints the targets table;",
        "`python -m bench NAME --help` runs one alone, `python -m bench all --quick` checks",
        "that they work (its figures mean nothing). The figures come from a 2-core VM:",
        "read the ratios, which each benchmark measures side by side in one run.",
        "",
    ]
    if picture.exists():
        out += [
            f"![Throughput of each sink beside its same-run baselines]({PICTURE})",
            "",
            "`python -m bench summary` draws this picture from the results files.",
            "",
        ]
    out += targets_section(results)
    out += ceilings_section(results)
    order = [n for n in TITLES if n in results] + [
        n for n in results if n not in TITLES and n != "chaos"
    ]
    for name in order:
        out += file_section(name, results[name])
    if "chaos" in results:
        out += soak_section(results["chaos"])
    return "\n".join(out) + "\n", picture.read_bytes() if picture.exists() else None


def main() -> None:
    page, picture = render()
    if sys.argv[1:] == ["--print"]:  # by hand: python docs/gen_benchmarks.py --print
        print(page)
        return
    import mkdocs_gen_files

    with mkdocs_gen_files.open(PAGE, "w") as handle:
        handle.write(page)
    mkdocs_gen_files.set_edit_path(PAGE, "gen_benchmarks.py")
    if picture is not None:
        with mkdocs_gen_files.open(PICTURE, "wb") as handle:
            handle.write(picture)


main()
