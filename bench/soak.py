"""``python -m bench soak`` (``make soak``): the fault matrix at scale.

For each sink (PostgreSQL, Kafka, Elasticsearch, Redis, the buffer: ``examples/soak/*.yaml``),
``--seeds`` chaos runs of ``exactlyonce chaos examples/soak/SINK.yaml --kills K --seed S``
on a fresh input of ``--events`` distinct events with at least ``--replay-fraction`` of them
re-sent (:mod:`bench.soak_input`), then one ``--duration T`` run. Every report is kept, the
figures go to ``bench/results/chaos.json`` and the matrix is printed as Markdown.

Chaos restarts local servers: it runs against the services under ``--home`` (default
``./.exactlyonce``, as ``make services`` starts them), whose ``services.env`` is loaded over
the environment; the Elasticsearch stand-in and the Redis sink's persistent redis-server are
started here (:mod:`bench.soak_servers`). Full soak: ``python -m bench soak``; a quick try:
``python -m bench soak --events 5000 --kills 5 --seeds 1 --duration 0 --only pg``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench.soak_input import write_input
from bench.soak_report import cell_entry, earlier_cells, markdown, matrix, write_results
from bench.soak_servers import SINK_SERVER_ENV, SINK_SERVERS

SINKS = {
    "pg": "postgres.yaml",
    "kafka": "kafka.yaml",
    "es": "elasticsearch.yaml",
    "redis": "redis.yaml",
    "buffer": "buffer.yaml",
}
NOTES = {
    "es": "stand-in server, not restarted",
    "redis": "sink's own AOF Redis not restarted; catalog Redis is",
}
FULL = {"events": 100_000, "kills": 20, "seeds": 5, "duration": 300.0}
EXAMPLES = Path("examples/soak")
RESULTS = Path("bench/results/chaos.json")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m bench soak", description=__doc__.split("\n\n")[0])
    p.add_argument("--events", type=int, default=FULL["events"], help="distinct events per run")
    p.add_argument("--kills", type=int, default=FULL["kills"], help="faults per seeded run")
    p.add_argument("--seeds", type=int, default=FULL["seeds"], help="seeded runs per sink")
    p.add_argument("--first-seed", type=int, default=1, help="seeds are FIRST, FIRST+1, ...")
    p.add_argument(
        "--duration", type=float, default=FULL["duration"],
        help="seconds of the --duration run per sink (0: none)",
    )  # fmt: skip
    p.add_argument("--only", default=",".join(SINKS), help=f"sinks, of {','.join(SINKS)}")
    p.add_argument("--replay-fraction", type=float, default=0.25, help="re-sent records/events")
    p.add_argument("--home", default=".exactlyonce", help="the services' home (services.env)")
    p.add_argument("--out", default=str(RESULTS), help="the aggregated JSON")
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
    files = 3 * kills + 10
    made = write_input(Path(".exactlyonce/soak") / run / "input", args.events, seed, files,
                       args.replay_fraction)  # fmt: skip
    print(f"SOAK   input: {made.describe()}", flush=True)
    report_path = run_dir / "chaos.json"
    cmd = [sys.executable, "-m", "exactlyonce.integration.cli", "chaos",
           str(EXAMPLES / SINKS[sink]), "--kills", str(kills), "--seed", str(seed),
           "--json", str(report_path), "--log-dir", str(run_dir / "logs")]  # fmt: skip
    if mode == "duration":
        cmd += ["--duration", str(args.duration)]
    began = time.monotonic()
    _follow(cmd, dict(env, SOAK_RUN=run), run_dir / "chaos.log")
    if not report_path.exists():
        raise SystemExit(f"soak: chaos wrote no report; see {run_dir / 'chaos.log'}")
    report = json.loads(report_path.read_text())
    extra = {"run": run, "logs": str(run_dir), "wall_seconds": round(time.monotonic() - began, 1),
             "events": args.events, "records": made.records,
             "replay_fraction": round(made.replay_fraction, 3), "kills_requested": kills,
             "duration": args.duration if mode == "duration" else None}  # fmt: skip
    return cell_entry(sink, mode, report, extra)


def _follow(cmd: list[str], env: dict[str, str], log: Path) -> None:
    """Run chaos, its whole output to ``log``, its progress lines to the console."""
    log.parent.mkdir(parents=True, exist_ok=True)
    shown = ("CHAOS fault", "CHAOS:", "CHAOS stopped", "CHAOS server", "CHAOS seed", "RESULT")
    with (
        log.open("w") as out,
        subprocess.Popen(
            cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        ) as proc,
    ):
        assert proc.stdout is not None
        for line in proc.stdout:
            out.write(line)
            out.flush()
            if line.startswith(shown):
                print(f"SOAK   {line.rstrip()}", flush=True)


def plan(args: argparse.Namespace) -> list[tuple[str, int, str]]:
    sinks = [s.strip() for s in args.only.split(",") if s.strip()]
    unknown = [s for s in sinks if s not in SINKS]
    if unknown:
        raise SystemExit(f"soak: unknown sink {unknown[0]!r}; known: {', '.join(SINKS)}")
    cells = []
    for sink in sinks:
        cells += [(sink, args.first_seed + i, "seed") for i in range(args.seeds)]
        if args.duration > 0:
            cells.append((sink, args.first_seed + args.seeds, "duration"))
    return cells


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    home = Path(args.home).absolute()
    env = services_env(home)
    root = home / "soak" / "runs"
    params = {k: getattr(args, k) for k in ("events", "kills", "seeds", "duration")}
    reduced = any(params[k] < FULL[k] for k in FULL)
    cells_todo = plan(args)
    print(f"SOAK {len(cells_todo)} chaos runs ({'REDUCED ' if reduced else ''}{params}) against "
          f"the services of {home}", flush=True)  # fmt: skip
    print(f"SOAK   PostgreSQL {_masked(env.get('EXACTLYONCE_PG_DSN', ''))}, "
          f"Redis {env.get('EXACTLYONCE_REDIS_URL')}, Kafka {env.get('KAFKA_BOOTSTRAP_SERVERS')}",
          flush=True)  # fmt: skip
    out = Path(args.out)
    sinks_now = {s for s, _, _ in cells_todo}
    cells = earlier_cells(out, set(cells_todo))
    started = time.monotonic()
    with contextlib.ExitStack() as stack:
        for sink in sorted(sinks_now & set(SINK_SERVERS)):
            env[SINK_SERVER_ENV[sink]] = stack.enter_context(SINK_SERVERS[sink](home / "soak"))
        for n, (sink, seed, mode) in enumerate(cells_todo, 1):
            print(f"SOAK [{n}/{len(cells_todo)}] {sink} {mode} {seed} "
                  f"({time.monotonic() - started:.0f} s in)", flush=True)  # fmt: skip
            cell = run_cell(sink, seed, mode, args, env, root)
            cell.update(reduced=reduced, parameters=params)
            cells.append(cell)
            print(f"SOAK [{n}/{len(cells_todo)}] {cell['verdict']}", flush=True)
            _write(out, cells, reduced, params)
    rows = _write(out, cells, reduced, params)
    print(("REDUCED soak " if reduced else "Soak ") + f"{params}:\n{markdown(rows, NOTES)}")
    print(f"SOAK results in {out}")
    return 0 if all(c["exactly_once"] for c in cells) else 1


def _write(out: Path, cells: list[dict[str, Any]], reduced: bool, params: dict[str, Any]) -> Any:
    rows = matrix(cells)
    reduced = reduced or any(c.get("reduced") for c in cells)  # each cell has its parameters
    doc = {"reduced": reduced, "parameters": params, "full_parameters": FULL,
           "matrix": rows, "cells": cells, "notes": NOTES}  # fmt: skip
    write_results(out, doc)
    return rows


def _masked(dsn: str) -> str:
    from exactlyonce.integration.services.env import mask_dsn

    return mask_dsn(dsn)


if __name__ == "__main__":
    sys.exit(main())
