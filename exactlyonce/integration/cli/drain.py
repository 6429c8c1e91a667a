"""``exactlyonce drain pipeline.yaml``: the drainer of a buffered pipeline, as a process.

Drains into the pipeline's sink, whichever it is (postgres, redis or elasticsearch with a
``buffer:``), through that sink's drain target (:mod:`exactlyonce.connectors.base.drain`).

Runs until interrupted (SIGINT/SIGTERM), or with ``--until-idle S`` until it has drained
everything the buffer committed and nothing new came for S seconds. Prints one line per
write transaction and a lag line every few seconds; with ``--until-idle``, also the
records drained against those left, with rate and ETA (a bar on a terminal, a plain line on
stderr every few seconds otherwise). Sink and broker outages are waited out
(backoff, retries, logged); a configuration problem exits with code 2. ``--processes N``
runs N members of this command, member i draining the partitions p with p % N == i.
"""

from __future__ import annotations

import argparse
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from exactlyonce.errors import ConfigError
from exactlyonce.integration.cli.common import EXIT_CONFIG, add_metrics_port, err, metrics_port
from exactlyonce.integration.config import load_config
from exactlyonce.progress import Progress
from exactlyonce.secrets import scrub

if TYPE_CHECKING:
    from exactlyonce.buffer.drain import Drainer, DrainReport
    from exactlyonce.connectors.base import ExactlyOnceSink
    from exactlyonce.integration.config import PipelineConfig

LAG_EVERY_S = 5.0


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    drain = sub.add_parser(
        "drain", help="move a buffered pipeline's records from its Kafka buffer into its sink"
    )
    drain.add_argument("config")
    drain.add_argument(
        "--until-idle",
        type=float,
        metavar="SECONDS",
        help="stop once everything committed is drained and nothing new came for this long",
    )
    drain.add_argument("--batch-size", type=int, metavar="N", help="rows per sink transaction")
    drain.add_argument(
        "--reset-offsets",
        action="store_true",
        help="forget the drain offsets stored in the sink first (needs --yes)",
    )
    drain.add_argument("--yes", action="store_true", help="really reset the offsets")
    drain.add_argument(
        "--processes",
        type=int,
        default=1,
        metavar="N",
        help="run N drainer processes, member i draining partitions p %% N == i (default 1)",
    )
    drain.add_argument(
        "--member",
        metavar="I/N",
        help="run only member I of N (what --processes starts; for running members yourself)",
    )
    add_metrics_port(drain)
    drain.set_defaults(func=cmd_drain)


def cmd_drain(args: argparse.Namespace) -> int:
    cfg = load_config(args.config)
    if args.reset_offsets and not args.yes:
        err(
            "refusing to reset the drain offsets without --yes: the drainer then starts at the "
            "beginning of the buffer topic (record IDs already in the sink stay no-ops, but a "
            "Redis stream appends its records again; a PostgreSQL table in mode append refuses "
            "the reset)"
        )
        return EXIT_CONFIG
    if args.processes != 1 and args.member:
        raise ConfigError("--member", "give --processes or --member, not both")
    port = metrics_port(args, cfg)
    if args.processes != 1:
        if args.reset_offsets:
            raise ConfigError("--reset-offsets", "reset the offsets in a run without --processes")
        return drain_processes(
            args.config, args.processes, args.until_idle, args.batch_size, metrics_port=port
        )
    return drain_command(
        cfg,
        until_idle_s=args.until_idle,
        batch_size=args.batch_size,
        reset_offsets=args.reset_offsets,
        member=parse_member(args.member) if args.member else (0, 1),
        metrics_port=port,
    )


def parse_member(text: str) -> tuple[int, int]:
    """``"I/N"`` -> ``(I, N)``, with 0 <= I < N."""
    try:
        index, members = (int(part) for part in text.split("/"))
    except ValueError:
        raise ConfigError("--member", f"I/N, for example 0/2, got {text!r}") from None
    if not 0 <= index < members:
        raise ConfigError("--member", f"I/N with 0 <= I < N, got {text!r}")
    return index, members


def drain_processes(
    config: str,
    processes: int,
    until_idle_s: float | None,
    batch_size: int | None,
    metrics_port: int | None = None,
) -> int:
    """Run ``processes`` members of this command (``--member i/N``) and wait for them all;
    SIGINT/SIGTERM are passed on. The exit code is the worst of theirs. With a
    ``metrics_port`` P, member i serves its metrics on port P + i."""
    if metrics_port is not None and metrics_port + processes - 1 > 65535:
        raise ConfigError("--metrics-port", f"members use ports {metrics_port} + i: too high")
    if not 2 <= processes <= 256:
        raise ConfigError("--processes", f"an integer from 1 to 256, got {processes}")
    base = [sys.executable, "-m", "exactlyonce", "drain", config]
    if until_idle_s is not None:
        base += ["--until-idle", str(until_idle_s)]
    if batch_size is not None:
        base += ["--batch-size", str(batch_size)]

    def member(i: int) -> list[str]:
        port = [] if metrics_port is None else ["--metrics-port", str(metrics_port + i)]
        return [*base, "--member", f"{i}/{processes}", *port]

    children = [subprocess.Popen(member(i)) for i in range(processes)]

    def forward(signum: int, _frame: object) -> None:
        for child in children:
            if child.poll() is None:
                child.send_signal(signum)

    previous = signal.signal(signal.SIGTERM, forward)
    try:
        codes = []
        for child in children:
            while True:
                try:
                    codes.append(child.wait())
                    break
                except KeyboardInterrupt:
                    forward(signal.SIGINT, None)
    finally:
        signal.signal(signal.SIGTERM, previous)
    return max(codes)


def _build_drainer(
    cfg: PipelineConfig, batch_size: int | None, member: tuple[int, int]
) -> tuple[ExactlyOnceSink, Drainer, list[str]]:
    """The sink, its drainer and the secrets to scrub from messages; ConfigError if the
    pipeline has no buffer."""
    from exactlyonce.buffer.drain.drainer import DRAIN_PROCESS_SWITCH_INTERVAL_S, Drainer
    from exactlyonce.integration.config import BufferedSink, build_sink, sink_field_errors

    settings = cfg.sink
    if not isinstance(settings, BufferedSink) or settings.buffer is None:
        raise ConfigError(
            "sink.buffer", "this pipeline has no Kafka buffer: there is nothing to drain"
        )
    secrets = cfg.sink.secrets()
    with sink_field_errors():
        sink = build_sink(cfg.sink, check=False)  # the drainer waits for the sink
        drainer = Drainer(
            sink,
            settings.buffer.build(),
            **_batch_size(batch_size or settings.buffer.batch_size),
            member=member,
            name=f"drainer:{member[0]}/{member[1]}" if member[1] > 1 else None,
            switch_interval_s=DRAIN_PROCESS_SWITCH_INTERVAL_S,  # this process only drains
        )
    return sink, drainer, secrets


def _progress_printer(
    drainer: Drainer, bar: Progress | None = None
) -> Callable[[DrainReport], None]:
    """A step callback printing each write transaction, and the lag every LAG_EVERY_S; with a
    ``bar`` (``--until-idle``: the drain has an end), the records drained against what is
    left (a bar on a terminal, the transaction lines above it; plain lines on stderr else)."""
    last_lag = [time.monotonic()]
    say = bar.write if bar is not None else lambda text: print(text, flush=True)

    def progress(step: DrainReport) -> None:
        now = time.monotonic()
        if bar is not None:
            moved = step.written + step.duplicates + step.dead_letters
            bar.update(moved, total=bar.done + moved + drainer.lag.records)
        if step.batches:
            say(
                f"drained {step.written} rows ({step.duplicates} duplicates, "
                f"{step.dead_letters} dead letters, {step.skipped} skipped) in "
                f"{step.seconds:.2f} s; lag {drainer.lag}"
            )
        elif now - last_lag[0] >= LAG_EVERY_S:
            say(f"lag {drainer.lag}")
        else:
            return
        last_lag[0] = now

    return progress


def drain_command(
    cfg: PipelineConfig,
    *,
    until_idle_s: float | None = None,
    batch_size: int | None = None,
    reset_offsets: bool = False,
    member: tuple[int, int] = (0, 1),
    metrics_port: int | None = None,
) -> int:
    """Drain ``cfg``'s buffer (member ``I/N`` of a pool) until SIGTERM/SIGINT or idle; with
    ``metrics_port``, serve the drain's metrics there."""
    sink, drainer, secrets = _build_drainer(cfg, batch_size, member)
    bar = Progress("drain", unit="records") if until_idle_s is not None else None
    on_step = _progress_printer(drainer, bar)
    if metrics_port is not None:
        on_step = _with_metrics(on_step, drainer, cfg.query_name, sink.sink_name, metrics_port)
    if reset_offsets:
        dropped = drainer.reset_offsets()
        print(f"drain offsets of {cfg.query_name!r} reset ({dropped} partitions)", flush=True)
    stop = threading.Event()
    previous = signal.signal(signal.SIGTERM, lambda *_: stop.set())
    mine = f", partitions p % {member[1]} == {member[0]}" if member[1] > 1 else ""
    print(f"draining {drainer.topic} -> {sink.sink_name} ({cfg.query_name}{mine})", flush=True)
    try:
        total = drainer.run(stop, until_idle_s=until_idle_s, on_step=on_step)
    except KeyboardInterrupt:
        stop.set()
        raise
    except ConfigError as exc:
        raise ConfigError(exc.field, scrub(exc.reason, *secrets)) from None
    finally:
        signal.signal(signal.SIGTERM, previous)
        drainer.close()
        if bar is not None:
            bar.close()
    t = drainer.total
    print(
        f"stopped: {t.written} written, {t.duplicates} duplicates, {t.dead_letters} dead "
        f"letters, {t.skipped} skipped, {t.retries} retries in {total.seconds:.1f} s; lag "
        f"{drainer.lag}",
        flush=True,
    )
    return 0


def _with_metrics(
    on_step: Callable[[DrainReport], None], drainer: Drainer, query: str, sink: str, port: int
) -> Callable[[DrainReport], None]:
    """``on_step``, and each step and the lag into the metrics served on ``port``."""
    from exactlyonce.integration import metrics  # prometheus-client, only when asked

    metrics.serve(port)

    def step_and_metrics(step: DrainReport) -> None:
        metrics.observe_drain(query, sink, step, drainer.lag)
        on_step(step)

    return step_and_metrics


def _batch_size(value: int | None) -> dict[str, int]:
    """The drainer's ``batch_size`` when one is given; its own default otherwise."""
    return {} if value is None else {"batch_size": value}
