"""``python -m bench soak`` (``make soak``): the fault matrix at scale.

For each sink, in the mode where a second write shows (PostgreSQL ``append``, Redis
``stream``, Elasticsearch ``op_type: index``, Kafka read by a plain ``read_committed``
consumer, the buffer draining into PostgreSQL ``append``: ``examples/soak/*.yaml``),
``--seeds`` chaos runs of ``exactlyonce chaos examples/soak/SINK.yaml --seed S`` of at least
``--kills`` kills of the pipeline itself each (driver kills at random moments, at named
points and aimed at the commit window, drainer kills; server restarts and proxy faults come
on top: :func:`fault_arguments`) on a fresh input of ``--events`` distinct events with at
least ``--replay-fraction`` of them re-sent (:mod:`bench.soak_input`), then one ``--duration
T`` run. Each chaos run also runs its schedule against the negative control (a plain
at-least-once writer of the same records), which must show duplicates, and reads both with
independent clients. Every report is kept, the figures go to ``bench/results/chaos.json``
and the matrix is printed as Markdown.

Chaos restarts local servers: it runs against the services under ``--home`` (default
``./.exactlyonce``, as ``make services`` starts them), whose ``services.env`` is loaded over
the environment; the Elasticsearch stand-in and the Redis sink's persistent redis-server are
started here (:mod:`bench.soak_servers`). Full soak: ``python -m bench soak``; a quick try:
``python -m bench soak --events 5000 --kills 5 --seeds 1 --duration 0 --only pg``.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import os
import subprocess
import sys
import time
from collections.abc import Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from bench.soak_input import SoakInput, produced_input, records_per_batch, write_input
from bench.soak_report import (
    PASSED,
    cell_entry,
    cell_verdict,
    earlier_cells,
    markdown,
    matrix,
    stale_summary,
    write_results,
)
from bench.soak_resume import (
    CellKey,
    Ledger,
    Wanted,
    cell_parameters,
    code_fingerprint,
    estimate_left,
    hours,
)
from bench.soak_servers import SINK_SERVER_ENV, SINK_SERVERS

SINKS = {
    "pg": "postgres.yaml",
    "kafka": "kafka.yaml",
    "kafka3": "kafka3.yaml",
    "es": "elasticsearch.yaml",
    "os": "opensearch.yaml",
    "redis": "redis.yaml",
    "buffer": "buffer.yaml",
    "pg-ks-source": "postgres-kafka-id-from-source.yaml",
    "pg-ks-columns": "postgres-kafka-id-columns.yaml",
    "redis-ks-source": "redis-kafka-id-from-source.yaml",
}
# Cells whose pipeline reads a Kafka source: chaos produces their input (--events) into a
# fresh topic; the soak sets SOAK_MAX_OFFSETS so they are read in as many batches as a
# files cell's input has files.
KAFKA_SOURCE = {"pg-ks-source", "pg-ks-columns", "redis-ks-source"}
SERVER_OF = {"redis-ks-source": "redis"}  # cells sharing another's sink server (one for both)
_PRODUCED = "input from chaos --events (its own re-sends, not --replay-fraction)"
NOTES = {
    "pg-ks-source": _PRODUCED,
    "pg-ks-columns": _PRODUCED,
    "es": "Elasticsearch stand-in (es-stand-in, journaled) restarted, hard and clean; "
    "catalog Redis too",
    "os": "genuine OpenSearch node (opensearch) restarted, hard and clean; catalog Redis too",
    "redis": "sink's own AOF Redis (redis-aof) restarted, hard and clean; catalog Redis too",
    "redis-ks-source": f"sink's own AOF Redis restarted, hard and clean; {_PRODUCED}",
    "kafka3": "3-node KRaft cluster; its server restarts are broker failovers",
}
FULL = {"events": 100_000, "kills": 20, "seeds": 5, "duration": 300.0}
# A cell's --kills are kills of the pipeline itself: driver kills (random, at named points,
# and COMMIT_SHARE of them aimed at the window between a sink commit and Spark's commit log)
# and the buffer's drainer kills. Server restarts (half of them hard) and lost replies /
# refusals / stalls through the proxy in front of the sink (none for Kafka, whose clients
# follow the brokers' addresses) ride on top.
SERVER_RESTARTS = 4
PROXY_FAULTS = 3
DRAINER_KILLS = 3
COMMIT_SHARE = 4  # one driver kill in 4 aimed at the commit window
# Seeds 1, 1+N, 1+2N ... (N: --cluster-every) run on a local Spark standalone cluster (a
# master, 2 workers of 1 core), where one pipeline kill in WORKER_SHARE is a worker kill
# (worker, executor, Python workers SIGKILLed, the worker started again); the other seeds run
# on local[2]. Not every seed: see docs/operations/chaos.md (#soak, "Why some seeds") for the
# measure.
CLUSTER_EVERY = 2
WORKER_SHARE = 5
NO_PROXY = {"kafka", "kafka3"}
# The servers a cell restarts, when not every local service of its pipeline: the kafka3
# cell's restarts are all broker failovers (its catalog's Redis is restarted in the others).
SERVERS = {"kafka3": "kafka3"}
FILES_PER_FAULT = 5
FULL_SEEDS = int(FULL["seeds"])
EXAMPLES = Path("examples/soak")
PARAMETERS = (
    "events",
    "kills",
    "seeds",
    "duration",
    "server_restarts",
    "proxy_faults",
    "cluster_every",
)
RESULTS = Path("bench/results/chaos.json")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m bench soak", description=__doc__.split("\n\n")[0])
    p.add_argument("--events", type=int, default=FULL["events"], help="distinct events per run")
    p.add_argument(
        "--kills",
        type=int,
        default=FULL["kills"],
        help="kills of the pipeline per seeded run, at least",
    )
    p.add_argument("--seeds", type=int, default=FULL["seeds"], help="seeded runs per sink")
    p.add_argument("--first-seed", type=int, default=1, help="seeds are FIRST, FIRST+1, ...")
    p.add_argument(
        "--duration", type=float, default=FULL["duration"],
        help="seconds of the --duration run per sink (0: none)",
    )  # fmt: skip
    p.add_argument(
        "--server-restarts", type=int, default=SERVER_RESTARTS,
        help="server restarts per run, on top of the kills (hard and clean in turn)",
    )  # fmt: skip
    p.add_argument(
        "--proxy-faults", type=int, default=PROXY_FAULTS,
        help="lost replies, refusals and stalls per run, on top (none for Kafka)",
    )  # fmt: skip
    p.add_argument(
        "--cluster-every", type=int, default=CLUSTER_EVERY, metavar="N",
        help="seeds 1, 1+N, 1+2N ... run on a Spark standalone cluster, with worker kills "
        "among the pipeline kills (1: every seeded run; 0: none)",
    )  # fmt: skip
    p.add_argument("--only", default=",".join(SINKS), help=f"sinks, of {','.join(SINKS)}")
    p.add_argument("--replay-fraction", type=float, default=0.25, help="re-sent records/events")
    p.add_argument("--home", default=".exactlyonce", help="the services' home (services.env)")
    p.add_argument("--out", default=str(RESULTS), help="the aggregated JSON")
    p.add_argument(
        "--redo", action="store_true",
        help="run the selected cells again even when this code already ran them",
    )  # fmt: skip
    return p


def services_env(home: Path) -> dict[str, str]:
    """The environment for chaos: this home's services.env over os.environ."""
    env_file = home / "services.env"
    if not env_file.exists():
        raise SystemExit(f"soak: no {env_file}: start the services first (make services)")
    env = dict(os.environ, EXACTLYONCE_HOME=str(home))
    for line in env_file.read_text().splitlines():
        key, sep, value = line.partition("=")
        if sep and not key.lstrip().startswith("#"):
            env[key.strip().removeprefix("export ").strip()] = value.strip().strip("'\"")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (os.getcwd(), env.get("PYTHONPATH")) if p)
    return env


def run_cell(
    sink: str, seed: int, mode: str, args: argparse.Namespace, env: dict[str, str], root: Path
) -> dict[str, Any]:
    """One chaos run of ``sink`` on a fresh input and a fresh query; its cell entry."""
    run = f"{sink}_{mode[0]}{seed}_{int(time.time())}"
    run_dir = root / run
    kills = args.kills
    cluster = on_cluster(seed, mode, args.cluster_every)
    faults = fault_arguments(sink, kills, args.server_restarts, args.proxy_faults, cluster=cluster)
    # A run that rides out a fault (a clean restart, a proxy fault) goes on reading while
    # the next fault waits for its epochs, so each fault gets room: 5 files, 135 for pg.
    # (The redis cell of seed 1 once read all its input in a run whose mid_write point never
    # fired, a task under pipeline_size records never staged; fixed in the Redis task.)
    files = FILES_PER_FAULT * int(faults[1]) + 10
    made, input_args, input_env = _input(sink, run, seed, files, args)
    print(f"SOAK   input: {made.describe()}", flush=True)
    report_path = run_dir / "chaos.json"
    cmd = [sys.executable, "-m", "exactlyonce.integration.cli", "chaos",
           str(EXAMPLES / SINKS[sink]), *faults, *input_args, "--seed", str(seed),
           "--json", str(report_path), "--log-dir", str(run_dir / "logs")]  # fmt: skip
    if mode == "duration":
        cmd += ["--duration", str(args.duration)]
    began = time.monotonic()
    _follow(cmd, dict(env, SOAK_RUN=run, **input_env), run_dir / "chaos.log")
    if not report_path.exists():
        raise SystemExit(f"soak: chaos wrote no report; see {run_dir / 'chaos.log'}")
    report = json.loads(report_path.read_text())
    extra = {"run": run, "logs": str(run_dir), "wall_seconds": round(time.monotonic() - began, 1),
             "events": args.events, "records": made.records,
             "replay_fraction": round(made.replay_fraction, 3), "kills_requested": kills,
             "duration": args.duration if mode == "duration" else None,
             "cluster": cluster}  # fmt: skip
    return cell_entry(sink, mode, report, extra)


def _input(
    sink: str, run: str, seed: int, files: int, args: argparse.Namespace
) -> tuple[SoakInput, list[str], dict[str, str]]:
    """The cell's input, chaos's arguments for it and the environment its pipeline file
    reads: files written here, or (a Kafka source) chaos's own ``--events``, read in as many
    batches as the files would be."""
    if sink in KAFKA_SOURCE:
        made = produced_input(args.events, seed, files)
        env = {"SOAK_MAX_OFFSETS": str(records_per_batch(made))}
        return made, ["--events", str(args.events)], env
    directory = Path(".exactlyonce/soak") / run / "input"
    return write_input(directory, args.events, seed, files, args.replay_fraction), [], {}


def on_cluster(seed: int, mode: str, every: int) -> bool:
    """A seeded cell runs on the standalone cluster when its seed is 1, 1+N, 1+2N ... (N:
    ``every``; 0: never); a duration cell never does."""
    return mode == "seed" and every > 0 and (seed - 1) % every == 0


def fault_arguments(
    sink: str,
    kills: int,
    restarts: int = SERVER_RESTARTS,
    proxy_faults: int = PROXY_FAULTS,
    *,
    cluster: bool = False,
) -> list[str]:
    """chaos's fault counts for a cell of ``kills`` kills of the pipeline: on the
    ``cluster``, one in WORKER_SHARE (at least one) worker kills; driver kills (a quarter of
    them, at least one, aimed at the commit window; a third at named points, as chaos mixes
    them) make up what the worker and drainer kills leave; the server restarts and proxy
    faults come on top."""
    restarts = min(restarts, kills)
    drainer = drainer_kills(sink, kills)
    workers = worker_kills(sink, kills, cluster)
    proxy = 0 if sink in NO_PROXY else proxy_faults
    drivers = kills - drainer - workers
    commits = max(1, drivers // COMMIT_SHARE) if drivers else 0
    total = drivers + restarts + proxy + drainer + workers
    args = ["--kills", str(total), "--server-faults", str(restarts)]
    args += ["--commit-kills", str(commits)]
    args += ["--proxy-faults", str(proxy)] if sink not in NO_PROXY else []
    args += ["--drainer-kills", str(drainer)] if sink == "buffer" else []
    args += ["--servers", SERVERS[sink]] if sink in SERVERS else []
    return args + (["--cluster", "--worker-kills", str(workers)] if cluster else [])


def drainer_kills(sink: str, kills: int) -> int:
    """The drainer kills among a cell's ``kills`` (a buffered sink's only)."""
    return min(DRAINER_KILLS, kills - 1) if sink == "buffer" else 0


def worker_kills(sink: str, kills: int, cluster: bool) -> int:
    """The worker kills among a cell's ``kills`` on the ``cluster``: one in WORKER_SHARE, at
    least one, within what the drainer kills leave."""
    return min(max(1, kills // WORKER_SHARE), kills - drainer_kills(sink, kills)) if cluster else 0


def _follow(cmd: list[str], env: dict[str, str], log: Path) -> None:
    """Run chaos, its whole output to ``log``, its progress lines to the console."""
    log.parent.mkdir(parents=True, exist_ok=True)
    shown = ("CHAOS fault", "CHAOS:", "CHAOS stopped", "CHAOS server", "CHAOS seed", "RESULT",
             "CHAOS negative control", "INDEPENDENT", "  duplicates")  # fmt: skip
    with (
        log.open("w") as out,
        subprocess.Popen(
            cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        ) as proc,
    ):
        assert proc.stdout is not None
        began = time.monotonic()
        for line in proc.stdout:
            out.write(f"{time.monotonic() - began:8.1f} {line}")
            out.flush()
            if line.startswith(shown):
                print(f"SOAK   {line.rstrip()}", flush=True)


def plan(args: argparse.Namespace) -> list[tuple[str, int, str]]:
    """The cells asked for, seed by seed across the sinks (a soak cut short still covers
    every sink), then each sink's duration run."""
    sinks = [s.strip() for s in args.only.split(",") if s.strip()]
    unknown = [s for s in sinks if s not in SINKS]
    if unknown:
        raise SystemExit(f"soak: unknown sink {unknown[0]!r}; known: {', '.join(SINKS)}")
    seeds = [args.first_seed + i for i in range(args.seeds)]
    cells = [(sink, seed, "seed") for seed in seeds for sink in sinks]
    if args.duration > 0:
        # its seed does not move with --seeds, so a later sitting finds it done
        cells += [(sink, args.first_seed + FULL_SEEDS, "duration") for sink in sinks]
    return cells


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    home = Path(args.home).absolute()
    env = services_env(home)
    params = {k: getattr(args, k) for k in PARAMETERS}
    reduced = is_reduced(args)
    out = Path(args.out)
    ledger = Ledger(code_fingerprint(Path.cwd()))
    ledger.sort_in(earlier_cells(out), wanted_parameters(args))
    cells_todo = _to_run(plan(args), ledger, args.redo)
    print(f"SOAK code {ledger.fingerprint}: {len(cells_todo)} chaos runs to do "
          f"({'REDUCED ' if reduced else ''}{params}) against the services of {home}; "
          f"{len(ledger.current)} done earlier by this code, {len(ledger.stale)} stale",
          flush=True)  # fmt: skip
    print(f"SOAK   PostgreSQL {_masked(env.get('EXACTLYONCE_PG_DSN', ''))}, "
          f"Redis {env.get('EXACTLYONCE_REDIS_URL')}, Kafka {env.get('KAFKA_BOOTSTRAP_SERVERS')}",
          flush=True)  # fmt: skip
    _run_cells(cells_todo, args, env, home, ledger, reduced)
    rows = _write(out, ledger, reduced, params)
    print(("REDUCED soak " if reduced else "Soak ") + f"{params}, code {ledger.fingerprint}:\n"
          f"{markdown(rows, NOTES)}\n{stale_summary(ledger.stale)}")  # fmt: skip
    print(f"SOAK results in {out} and {out.with_suffix('.md')}")
    return 0 if all(cell_verdict(c) == PASSED for c in ledger.current) else 1


def is_reduced(args: argparse.Namespace) -> bool:
    """Cells smaller than the full soak's (fewer seeds or sinks is coverage, not size)."""
    smaller = args.events < FULL["events"] or args.kills < FULL["kills"]
    smaller |= args.server_restarts < SERVER_RESTARTS or args.proxy_faults < PROXY_FAULTS
    return bool(smaller or 0 < args.duration < FULL["duration"] or args.replay_fraction < 0.2)


def wanted_parameters(args: argparse.Namespace) -> Wanted:
    """The parameters a cell (sink, seed, mode) of this code must have been run with to
    count, whether it ran on the standalone cluster and its worker kills among them."""
    return functools.partial(_wanted, args)


def _wanted(args: argparse.Namespace, key: CellKey) -> dict[str, Any]:
    sink, seed, mode = key
    duration = args.duration or FULL["duration"]  # --duration 0 runs none; earlier ones count
    cluster = on_cluster(seed, mode, args.cluster_every)
    return cell_parameters(
        mode,
        args.events,
        args.kills,
        args.replay_fraction,
        duration,
        restarts=args.server_restarts,
        proxy_faults=args.proxy_faults,
        cluster=cluster,
        worker_kills=worker_kills(sink, args.kills, cluster),
    )


def _to_run(
    cells: list[tuple[str, int, str]], ledger: Ledger, redo: bool
) -> list[tuple[str, int, str]]:
    """The planned cells this code has not run yet (all of them with ``redo``)."""
    todo = []
    for key in cells:
        done = ledger.done(key)
        if done is not None and not redo:
            print(f"SOAK   skip {' '.join(map(str, key))}: done {done.get('date')}, "
                  f"{cell_verdict(done)}", flush=True)  # fmt: skip
        else:
            todo.append(key)
    return todo


def _run_cells(
    cells_todo: list[tuple[str, int, str]],
    args: argparse.Namespace,
    env: dict[str, str],
    home: Path,
    ledger: Ledger,
    reduced: bool,
) -> None:
    """Run each cell, writing the results file after each; a line per run with the time
    spent and an estimate of what is left."""
    root = home / "soak" / "runs"
    params = {k: getattr(args, k) for k in PARAMETERS}
    wanted = wanted_parameters(args)
    started = time.monotonic()
    total = len(cells_todo)
    with contextlib.ExitStack() as stack:
        for server in sink_servers([s for s, _, _ in cells_todo]):
            env[SINK_SERVER_ENV[server]] = stack.enter_context(SINK_SERVERS[server](home / "soak"))
        for n, (sink, seed, mode) in enumerate(cells_todo, 1):
            left = estimate_left([m for _, _, m in cells_todo[n - 1 :]], ledger)
            guess = (
                "time left unknown until a run ends"
                if left is None
                else f"about {hours(left)} left"
            )
            print(f"SOAK [{n}/{total}] {sink} {mode} {seed}: {_elapsed(started)} in, {guess}",
                  flush=True)  # fmt: skip
            cell = run_cell(sink, seed, mode, args, env, root)
            date = datetime.now(timezone.utc).isoformat(timespec="seconds")
            cell.update(reduced=reduced, parameters=params, params=wanted((sink, seed, mode)),
                        fingerprint=ledger.fingerprint, date=date)  # fmt: skip
            changed = code_fingerprint(Path.cwd()) != ledger.fingerprint
            if changed:  # the run may have mixed two versions of the code
                ledger.stale.append({**cell, "stale": "the code changed while it ran"})
            else:
                if args.redo:
                    ledger.supersede((sink, seed, mode), date)
                ledger.add(cell)
            _write(Path(args.out), ledger, reduced, params)
            if changed:
                raise SystemExit(f"soak: the code changed during {sink} {mode} {seed}; "
                                 "that cell is kept as stale; run make soak again")  # fmt: skip
            took = f"{cell['wall_seconds']:.0f} s; {_elapsed(started)} in"
            print(f"SOAK [{n}/{total}] cell {cell_verdict(cell)}: {cell['verdict']} ({took})",
                  flush=True)  # fmt: skip


def sink_servers(sinks: Sequence[str]) -> list[str]:
    """The sink servers the soak starts for these cells (:mod:`bench.soak_servers`), each
    once, whichever cells share it."""
    return sorted({SERVER_OF.get(s, s) for s in sinks} & set(SINK_SERVERS))


def _elapsed(since: float) -> str:
    return hours(time.monotonic() - since)


def _write(out: Path, ledger: Ledger, reduced: bool, params: dict[str, Any]) -> Any:
    """The results file (and its matrix as Markdown beside it): the matrix sums this code's
    cells only; the others are kept under ``stale_cells``."""
    rows = matrix(ledger.current)
    dates = sorted(str(c.get("date")) for c in ledger.current)
    span = " to ".join(dict.fromkeys(dates[:1] + dates[-1:]))
    doc = {"fingerprint": ledger.fingerprint, "reduced": reduced, "parameters": params,
           "full_parameters": FULL, "dates": dates[:1] + dates[-1:], "matrix": rows,
           "cells": ledger.current, "stale_cells": ledger.stale, "notes": NOTES}  # fmt: skip
    write_results(out, doc)
    full = len(SINKS) * (FULL["seeds"] + 1)
    head = (f"{'REDUCED ' if reduced else ''}soak, code {ledger.fingerprint}: "
            f"{len(ledger.current)} of the full soak's {full} cells, {span}")  # fmt: skip
    out.with_suffix(".md").write_text(
        f"{head}\n\n{markdown(rows, NOTES)}\n\n{stale_summary(ledger.stale)}\n"
    )
    return rows


def _masked(dsn: str) -> str:
    from exactlyonce.integration.lab.services.env import mask_dsn

    return mask_dsn(dsn)


if __name__ == "__main__":
    sys.exit(main())
