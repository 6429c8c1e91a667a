"""The work of ``exactlyonce chaos``: run a pipeline under a seeded schedule of faults, audit
its sink, then run the same schedule against the negative control and audit that (the rest
of :mod:`exactlyonce.integration.lab.chaos`).

The arguments are parsed by the product's :mod:`exactlyonce.integration.cli.chaos`, which
reaches :func:`cmd_chaos` by name, on use (:mod:`exactlyonce.integration.cli.lab`).

Prints the seed first and each fault as it starts and ends, then the sink's audit (the same
as ``exactlyonce audit``), its independent reading, the control's run and reading, and one
verdict line (:mod:`.report`). Exit 0 for ``EXACTLY ONCE``, 1 for ``FAILED`` (or when the
last run failed), 3 for ``INCONCLUSIVE`` (a fault missed, no control, or a control without
duplicates), 2 on a bad configuration.
"""

from __future__ import annotations

import argparse
import json
import random
import secrets
import shutil
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from exactlyonce.errors import ConfigError
from exactlyonce.integration.audit import audit_pipeline, print_sink_audit
from exactlyonce.integration.cli.common import EXIT_FAILED, EXIT_OK
from exactlyonce.integration.config import PipelineConfig, load_config
from exactlyonce.integration.lab.chaos import (
    PROXY_KINDS,
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
    id_from,
    kill_all,
    needs_fresh_input,
    plan,
    report_json,
    restartable,
    rewrite_pipeline,
    sink_points,
    sink_proxy,
    verdict,
    write_events,
)
from exactlyonce.integration.lab.chaos.control import target as targets
from exactlyonce.integration.lab.chaos.control.clients import client
from exactlyonce.integration.lab.chaos.control.reading import Tally, expected_keys, tally
from exactlyonce.integration.lab.chaos.harness import SparkCommits
from exactlyonce.integration.lab.chaos.report import INCONCLUSIVE, ControlReport
from exactlyonce.integration.lab.chaos.servers import FAILOVER_ROLES
from exactlyonce.integration.lab.cluster import Cluster
from exactlyonce.integration.lab.runs import IDLE_SECONDS
from exactlyonce.secrets import scrub

if TYPE_CHECKING:
    from exactlyonce.integration.audit import SinkAudit

DEFAULT_EVENTS = 2000  # when the source directory has no input of the user's
CLUSTER_WORKERS = ("worker1", "worker2")
EXIT_INCONCLUSIVE = 3
CONTROL_RUNNER = "exactlyonce.integration.lab.chaos.control.runner"


def cmd_chaos(args: argparse.Namespace) -> int:
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(1 << 31)
    print(f"CHAOS seed {seed} (replay with --seed {seed})", flush=True)
    began = time.monotonic()
    cfg = load_config(args.config)
    log_dir = Path(args.log_dir or Path(cfg.checkpoint).parent / "chaos-logs")
    log_dir.mkdir(parents=True, exist_ok=True)
    servers, skipped = _chosen_servers(args, *restartable(cfg))
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
            commit_kills=args.commit_kills,
            server_roles=FAILOVER_ROLES,
            sink_servers=[s.service for s in servers if "sink" in s.roles],
        )
        expected = _expected(args, cfg, seed, log_dir)
        control_why = _control_refusal(args, expected)
        written, final, unread = _our_targets(cfg)
        _print_plan(args.config, cfg, servers, skipped, faults, expected.origin)
        if args.control:
            return _control_only(args, cfg, faults, log_dir, proxy, expected, control_why)
        chaos, failure = _run(args, cfg, faults, log_dir, proxy, written)
        started = [o.fault for o in chaos.outcomes]
        audit = _audit(cfg, expected, _dead_letters(args, expected), failure)
        independent = _independent(final, expected, failure) if final is not None else None
        control = None
        if not control_why:
            control = _control(args, cfg, started, log_dir, proxy, expected)
    finally:
        if proxy is not None:
            proxy.stop()
    report = ChaosReport(
        pipeline=args.config, seed=seed, kills=args.kills, outcomes=chaos.outcomes, audit=audit,
        failure=failure, servers=servers, skipped=skipped, runs=chaos.runs,
        runs_died=chaos.runs_died, seconds=time.monotonic() - began, sink=cfg.sink.type,
        write_mode=targets.write_mode(cfg), source=cfg.source.type, id_from=id_from(cfg),
        independent=independent, independent_skipped=unread,
        control=control, control_skipped=control_why, not_started=len(faults) - len(started),
    )  # fmt: skip
    if args.json:
        Path(args.json).write_text(json.dumps(report_json(report), indent=2) + "\n")
    print(verdict(report), flush=True)
    print(f"CHAOS logs in {log_dir}; replay with --seed {seed}", flush=True)
    if report.exactly_once:
        return EXIT_OK
    return EXIT_INCONCLUSIVE if report.result == INCONCLUSIVE else EXIT_FAILED


def _chosen_servers(
    args: argparse.Namespace, servers: list[Server], skipped: list[Skipped]
) -> tuple[list[Server], list[Skipped]]:
    """The servers ``--servers`` names (all by default); the others skipped, saying so."""
    if args.servers is None:
        return servers, skipped
    names = [n.strip() for n in args.servers.split(",") if n.strip()]
    found = {s.service for s in servers}
    unknown = [n for n in names if n not in found]
    if unknown:
        local = ", ".join(sorted(found)) or "none"
        raise ConfigError(
            "--servers", f"{', '.join(unknown)}: not a local service of this pipeline ({local})"
        )
    chosen = [s for s in servers if s.service in names]
    left = [Skipped("/".join(s.roles), s.address, "not in --servers") for s in servers]
    return chosen, skipped + [k for k, s in zip(left, servers, strict=True) if s not in chosen]


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
    points = sink_points(cfg.sink, buffered, cluster=args.cluster)
    if args.cluster:
        print(f"CHAOS point kills at the driver's points only ({', '.join(points)}): the "
              "cluster's executors do not inherit a run's environment", flush=True)  # fmt: skip
    return points


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


def _control_refusal(args: argparse.Namespace, expected: ExpectedInput) -> str:
    """Why the negative control cannot run ('' when it runs)."""
    if args.no_control:
        if args.control:
            raise ConfigError("--control", "--no-control leaves nothing to run")
        return "--no-control"
    if expected.sent is None:
        why = (
            "it counts the writes beyond the records the input sent, which needs the input "
            "(--events, or the source's JSON files), not --expected-ids"
        )
        if args.control:
            raise ConfigError("--control", why)
        return why
    return ""


def _our_targets(cfg: PipelineConfig) -> tuple[targets.Target | None, targets.Target | None, str]:
    """Where our runs' commits show and where the records end, as plain clients read them
    (None and why when the sink's mode or settings leave nothing for them to count)."""
    try:
        written, final = targets.ours(cfg)
    except ConfigError as exc:
        print(f"CHAOS independent audit SKIPPED: {exc}", flush=True)
        return None, None, str(exc)
    return written, final, ""


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


def _independent(
    final: targets.Target, expected: ExpectedInput, failure: str, sent: bool = False
) -> Tally | None:
    """The records at ``final`` read by a plain client and tallied (with ``sent``: against
    the records the input sent, the control's rule), printed; None if unreadable."""
    try:
        reading = client(final.kind).read(final)
    except Exception as exc:
        if not failure:
            raise
        print(f"CHAOS no independent reading: {scrub(str(exc), final.address)}", flush=True)
        return None
    counted = tally(reading, expected_keys(expected.ids), expected.sent if sent else None)
    rule = "writes beyond the records sent" if sent else "a key found twice"
    print(f"INDEPENDENT {reading.target} ({reading.reader}; a duplicate: {rule})")
    for name, value in (
        ("records read", sum(reading.found.values())),
        ("duplicates", counted.duplicates),
        ("missing", len(counted.missing_keys)),
        ("unexpected", len(counted.unexpected_keys)),
        ("rewritten in place", reading.rewritten),
    ):
        print(f"  {name:<22}{value:>10}")
    return counted


def _dead_letters(args: argparse.Namespace, expected: ExpectedInput) -> int | None:
    given: int | None = args.expected_dead_letters
    return given if given is not None else expected.dead_letters


def _run(
    args: argparse.Namespace,
    cfg: PipelineConfig,
    faults: list[Fault],
    log_dir: Path,
    proxy: SinkProxy | None,
    written: targets.Target | None,
    control: targets.Target | None = None,
) -> tuple[Chaos, str]:
    """Every fault (those ``--duration`` leaves time for: the others are never started, and
    so not part of the run), then the last run (and drain); the runs, and what failed at
    the end. With ``control``, the runs are the control's, writing there."""
    deadline = None if args.duration is None or control else time.monotonic() + args.duration
    buffered = getattr(cfg.sink, "buffer", None) is not None and control is None
    if control is None:
        chaos = Chaos(
            config=args.config,
            sink=cfg.build_sink(check=False),
            log_dir=log_dir,
            checkpoint=cfg.checkpoint,
            written=written,
            buffered=buffered,
            proxy=proxy,
        )
    else:
        checkpoint = log_dir / "checkpoint"
        chaos = Chaos(
            config=args.config,
            sink=SparkCommits(str(checkpoint)),
            log_dir=log_dir,
            checkpoint=str(checkpoint),
            written=control,
            control=True,
            proxy=proxy,
        )
    try:
        _rig(args, chaos, buffered)
        if control is not None:
            chaos.command = [
                "-m", CONTROL_RUNNER, chaos.config, "--name", control.name,
                "--checkpoint", chaos.checkpoint, "--until-idle", str(IDLE_SECONDS),
            ]  # fmt: skip
        for fault in faults:
            if deadline is not None and time.monotonic() > deadline:
                left = len(faults) - len(chaos.outcomes)
                print(f"CHAOS --duration passed: the last {left} faults are not started "
                      "(not part of this run)", flush=True)  # fmt: skip
                break
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


def _control(
    args: argparse.Namespace,
    cfg: PipelineConfig,
    faults: list[Fault],
    log_dir: Path,
    proxy: SinkProxy | None,
    expected: ExpectedInput,
) -> ControlReport:
    """The same faults against the negative control (a fresh destination and checkpoint),
    then its independent reading."""
    name = targets.control_name(cfg, secrets.token_hex(3))
    target = targets.control(cfg, name)
    print(
        f"CHAOS negative control: the same {len(faults)} faults against a plain at-least-once "
        f"writer of the same records (no protocol) into {target.describe()}",
        flush=True,
    )
    control_dir = log_dir / "control"
    shutil.rmtree(control_dir, ignore_errors=True)
    control_dir.mkdir(parents=True)
    prepare = client(target.kind).prepare
    if target.kind == "kafka":
        prepare(target, getattr(targets.sink_settings(cfg), "partitions", None) or 2)
    else:
        prepare(target)
    if proxy is not None:
        proxy.control = True
    chaos, failure = _run(args, cfg, faults, control_dir, proxy, target, control=target)
    reading = _independent(target, expected, failure, sent=True)
    return ControlReport(
        target.describe(), chaos.outcomes, reading, failure, chaos.runs, chaos.runs_died
    )


def _control_only(
    args: argparse.Namespace,
    cfg: PipelineConfig,
    faults: list[Fault],
    log_dir: Path,
    proxy: SinkProxy | None,
    expected: ExpectedInput,
    why: str,
) -> int:
    """``--control``: the schedule against the negative control alone."""
    if why:
        raise ConfigError("--control", why)
    control = _control(args, cfg, faults, log_dir, proxy, expected)
    dupes = control.duplicates
    shown = dupes is not None and dupes > 0 and not control.missed and not control.failure
    missed = ", ".join(f"fault {o.fault.n} ({o.fault.kind}) MISSED" for o in control.missed)
    print(
        f"CHAOS CONTROL: {'DUPLICATES SHOWN' if shown else 'NOT EVIDENCE'} (seed {args.seed}, "
        f"{dupes} duplicates{', ' + missed if missed else ''})",
        flush=True,
    )
    return EXIT_OK if shown else EXIT_INCONCLUSIVE


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
    sys.stdout.flush()
