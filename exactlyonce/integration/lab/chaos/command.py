"""The work of ``exactlyonce chaos``: run a pipeline under a seeded schedule of faults, then
audit its sink (the rest of :mod:`exactlyonce.integration.lab.chaos`).

The arguments are parsed by the product's :mod:`exactlyonce.integration.cli.chaos`, which
reaches :func:`cmd_chaos` by name, on use (:mod:`exactlyonce.integration.cli.lab`).

Prints the seed first and each fault as it starts and ends, then the sink's audit (the same
as ``exactlyonce audit``) and one verdict line. Exit 0 when the sink holds every expected
record exactly once, 1 otherwise (or when the last run failed), 2 on a bad configuration.
"""

from __future__ import annotations

import argparse
import json
import random
import time
from pathlib import Path
from typing import TYPE_CHECKING

from exactlyonce.errors import ConfigError
from exactlyonce.integration.audit import audit_pipeline, print_sink_audit
from exactlyonce.integration.cli.common import EXIT_FAILED, EXIT_OK
from exactlyonce.integration.config import PipelineConfig, load_config
from exactlyonce.integration.lab.chaos import (
    PROXY_KINDS,
    SINK_POINTS,
    Chaos,
    ChaosReport,
    DrainerProcess,
    ExpectedInput,
    Extras,
    Fault,
    Server,
    SinkProxy,
    Skipped,
    check_points,
    check_proxy_kinds,
    fresh_query,
    from_file,
    from_source,
    kill_all,
    needs_fresh_input,
    plan,
    report_json,
    restartable,
    rewrite_pipeline,
    sink_proxy,
    verdict,
    write_events,
)
from exactlyonce.integration.lab.cluster import Cluster
from exactlyonce.secrets import scrub

if TYPE_CHECKING:
    from exactlyonce.integration.audit import SinkAudit

DEFAULT_EVENTS = 2000  # when the source directory has no input of the user's
CLUSTER_WORKERS = ("worker1", "worker2")


def cmd_chaos(args: argparse.Namespace) -> int:
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(1 << 31)
    print(f"CHAOS seed {seed} (replay with --seed {seed})", flush=True)
    began = time.monotonic()
    cfg = load_config(args.config)
    log_dir = Path(args.log_dir or Path(cfg.checkpoint).parent / "chaos-logs")
    log_dir.mkdir(parents=True, exist_ok=True)
    servers, skipped = restartable(cfg)
    services = [s.service for s in servers]
    proxy = _proxy(args, cfg)
    try:
        faults = plan(
            seed,
            args.kills,
            _points(args, cfg),
            services,
            server_faults=args.server_faults,
            extras=_extras(args, cfg, proxy),
        )
        expected = _expected(args, cfg, seed, log_dir)
        _print_plan(args.config, cfg, servers, skipped, faults, expected.origin)
        chaos, failure = _run(args, cfg, faults, log_dir, proxy)
    finally:
        if proxy is not None:
            proxy.stop()
    audit = _audit(cfg, expected, _dead_letters(args, expected), failure)
    report = ChaosReport(
        pipeline=args.config, seed=seed, kills=args.kills, outcomes=chaos.outcomes, audit=audit,
        failure=failure, servers=servers, skipped=skipped, runs=chaos.runs,
        runs_died=chaos.runs_died, seconds=time.monotonic() - began,
    )  # fmt: skip
    if args.json:
        Path(args.json).write_text(json.dumps(report_json(report), indent=2) + "\n")
    print(verdict(report), flush=True)
    print(f"CHAOS logs in {log_dir}; replay with --seed {seed}", flush=True)
    return EXIT_OK if report.exactly_once else EXIT_FAILED


def _proxy(args: argparse.Namespace, cfg: PipelineConfig) -> SinkProxy | None:
    """The fault proxy in front of the sink's server, unless ``--no-proxy`` or it cannot
    have one (said, with the reason)."""
    if args.no_proxy:
        if args.proxy_faults:
            raise ConfigError("--proxy-faults", "--no-proxy leaves no proxy for them")
        return None
    proxy, why = sink_proxy(cfg)
    if proxy is None:
        print(f"CHAOS proxy faults SKIPPED for the sink: {why}", flush=True)
    else:
        print(
            f"CHAOS proxy faults on the sink at {proxy.upstream}, which the runs reach "
            f"through 127.0.0.1:{proxy.proxy.port}",
            flush=True,
        )
    return proxy


def _extras(args: argparse.Namespace, cfg: PipelineConfig, proxy: SinkProxy | None) -> Extras:
    kinds: tuple[str, ...] = PROXY_KINDS
    if args.proxy_kinds is not None:
        kinds = check_proxy_kinds([k.strip() for k in args.proxy_kinds.split(",") if k.strip()])
    return Extras(
        proxy_kinds=kinds if proxy is not None else (),
        proxy_faults=args.proxy_faults,
        workers=CLUSTER_WORKERS if args.cluster else (),
        worker_kills=args.worker_kills,
        drainer=getattr(cfg.sink, "buffer", None) is not None,
        drainer_kills=args.drainer_kills,
    )


def _points(args: argparse.Namespace, cfg: PipelineConfig) -> tuple[str, ...]:
    if args.points is not None:
        return check_points([p.strip() for p in args.points.split(",") if p.strip()])
    buffered = getattr(cfg.sink, "buffer", None) is not None
    return SINK_POINTS["buffered" if buffered else cfg.sink.type]


def _expected(
    args: argparse.Namespace, cfg: PipelineConfig, seed: int, log_dir: Path
) -> ExpectedInput:
    """The IDs to audit against: ``--expected-ids``, a fresh input (``--events``, or by
    default when the source directory holds no input but chaos's own), or the source's
    files as they are."""
    if args.expected_ids:
        return from_file(args.expected_ids)
    events = args.events
    if events is None and needs_fresh_input(cfg):
        events = DEFAULT_EVENTS
        print(f"CHAOS the source directory holds no input of yours: writing {events} events")
    if events is None:
        return from_source(cfg)
    if events < 1:
        raise ConfigError("--events", f"must be 1 or more, got {events}")
    fresh_query(cfg, args.config)
    files = args.files if args.files is not None else 3 * args.kills + 10
    return write_events(cfg, events, seed, files, log_dir / "expected-ids.txt")


def _audit(
    cfg: PipelineConfig, expected: ExpectedInput, dead_letters: int | None, failure: str
) -> SinkAudit | None:
    """The sink's audit, printed; None when the chaos stopped and the sink cannot be read."""
    try:
        audit = audit_pipeline(cfg, expected.ids, expected_dead_letters=dead_letters)
    except Exception as exc:
        if not failure:
            raise
        print(f"CHAOS no audit: {scrub(str(exc), *cfg.sink.secrets())}", flush=True)
        return None
    print_sink_audit(audit)
    return audit


def _dead_letters(args: argparse.Namespace, expected: ExpectedInput) -> int | None:
    given: int | None = args.expected_dead_letters
    return given if given is not None else expected.dead_letters


def _run(
    args: argparse.Namespace,
    cfg: PipelineConfig,
    faults: list[Fault],
    log_dir: Path,
    proxy: SinkProxy | None,
) -> tuple[Chaos, str]:
    """Every fault, then the last run (and drain); the runs, and what failed at the end."""
    deadline = None if args.duration is None else time.monotonic() + args.duration
    buffered = getattr(cfg.sink, "buffer", None) is not None
    chaos = Chaos(
        config=args.config,
        sink=cfg.build_sink(check=False),
        log_dir=log_dir,
        buffered=buffered,
        deadline=deadline,
        proxy=proxy,
    )
    try:
        _rig(args, chaos, buffered)
        for fault in faults:
            chaos.inject(fault, len(faults))
        print("CHAOS faults done; the last run goes on until the input is read", flush=True)
        return chaos, chaos.finish()
    except RuntimeError as exc:  # a server that did not come back: no run can go on
        print(f"CHAOS stopped: {exc}", flush=True)
        return chaos, f"chaos stopped: {str(exc).splitlines()[0]}"
    finally:
        kill_all()
        if chaos.drainer is not None:
            chaos.drainer.stop()
        if chaos.cluster is not None:
            chaos.cluster.stop()


def _rig(args: argparse.Namespace, chaos: Chaos, buffered: bool) -> None:
    """The standalone cluster (``--cluster``), the pipeline file the runs get (through the
    proxy, on the cluster) and the drainer of a buffered pipeline, set on ``chaos``."""
    if args.cluster:
        chaos.cluster = Cluster(chaos.log_dir / "cluster")
        print("CHAOS starting a Spark standalone cluster (a master, 2 workers)", flush=True)
        chaos.cluster.start(workers=len(CLUSTER_WORKERS))
        print(f"CHAOS the runs go to {chaos.cluster.master_url}", flush=True)
    chaos.config, chaos.env = rewrite_pipeline(
        args.config,
        chaos.log_dir / "pipeline.chaos.yaml",
        sink_address=chaos.proxy.address if chaos.proxy is not None else None,
        master=chaos.cluster.master_url if chaos.cluster is not None else None,
    )
    if buffered:
        chaos.drainer = DrainerProcess(chaos.config, chaos.log_dir, chaos.env)


def _print_plan(
    config: str,
    cfg: PipelineConfig,
    servers: list[Server],
    skipped: list[Skipped],
    faults: list[Fault],
    origin: str,
) -> None:
    print(f"CHAOS pipeline {config}: {cfg.query_name}, {cfg.source.type} -> {cfg.sink.type}")
    for s in servers:
        print(f"CHAOS server faults on {s.service} ({'/'.join(s.roles)}) at {s.address}")
    for k in skipped:
        print(f"CHAOS server faults SKIPPED for the {k.role} at {k.address}: {k.why}")
    print(f"CHAOS audit against {origin}")
    print(f"CHAOS schedule of {len(faults)} faults:", flush=True)
    for f in faults:
        print(f"  {f.n:>3}. {f.describe()}", flush=True)
