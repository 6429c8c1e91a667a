"""``exactlyonce drain pipeline.yaml``: the drainer of a buffered pipeline, as a process.

Runs until interrupted (SIGINT/SIGTERM), or with ``--until-idle S`` until it has drained
everything the buffer committed and nothing new came for S seconds. Prints one line per
write transaction and a lag line every few seconds. Sink and broker outages are waited out
(backoff, retries, logged); a configuration problem exits with code 2.
"""

from __future__ import annotations

import signal
import threading
import time
from typing import TYPE_CHECKING

from exactlyonce.errors import ConfigError
from exactlyonce.secrets import scrub

if TYPE_CHECKING:
    from exactlyonce.buffer.drain.drainer import DrainReport
    from exactlyonce.integration.config import PipelineConfig

LAG_EVERY_S = 5.0


def drain_command(
    cfg: PipelineConfig,
    *,
    until_idle_s: float | None = None,
    batch_size: int | None = None,
    reset_offsets: bool = False,
    member: tuple[int, int] = (0, 1),
) -> int:
    from exactlyonce.buffer.drain.drainer import DRAIN_PROCESS_SWITCH_INTERVAL_S, Drainer
    from exactlyonce.integration.config import PostgresSinkConfig, sink_field_errors

    settings = cfg.sink
    if not isinstance(settings, PostgresSinkConfig) or settings.buffer is None:
        raise ConfigError(
            "sink.buffer", "this pipeline has no Kafka buffer: there is nothing to drain"
        )
    secrets = settings.secrets()
    with sink_field_errors():
        sink = settings.build(cfg.query_name, check=False)  # the drainer waits for the sink
        drainer = Drainer(
            sink,
            settings.buffer.build(),
            batch_size=batch_size or settings.buffer.batch_size,
            member=member,
            name=f"drainer:{member[0]}/{member[1]}" if member[1] > 1 else None,
            switch_interval_s=DRAIN_PROCESS_SWITCH_INTERVAL_S,  # this process only drains
        )
    if reset_offsets:
        dropped = drainer.reset_offsets()
        print(f"drain offsets of {cfg.query_name!r} reset ({dropped} partitions)", flush=True)
    stop = threading.Event()
    previous = signal.signal(signal.SIGTERM, lambda *_: stop.set())
    last_lag = [time.monotonic()]
    mine = f", partitions p % {member[1]} == {member[0]}" if member[1] > 1 else ""
    print(f"draining {drainer.topic} -> {sink.sink_name} ({cfg.query_name}{mine})", flush=True)

    def progress(step: DrainReport) -> None:
        now = time.monotonic()
        if step.batches:
            print(
                f"drained {step.written} rows ({step.duplicates} duplicates, "
                f"{step.dead_letters} dead letters, {step.skipped} skipped) in "
                f"{step.seconds:.2f} s; lag {drainer.lag}",
                flush=True,
            )
        elif now - last_lag[0] >= LAG_EVERY_S:
            print(f"lag {drainer.lag}", flush=True)
        else:
            return
        last_lag[0] = now

    try:
        total = drainer.run(stop, until_idle_s=until_idle_s, on_step=progress)
    except KeyboardInterrupt:
        stop.set()
        raise
    except ConfigError as exc:
        raise ConfigError(exc.field, scrub(exc.reason, *secrets)) from None
    finally:
        signal.signal(signal.SIGTERM, previous)
        drainer.close()
    t = drainer.total
    print(
        f"stopped: {t.written} written, {t.duplicates} duplicates, {t.dead_letters} dead "
        f"letters, {t.skipped} skipped, {t.retries} retries in {total.seconds:.1f} s; lag "
        f"{drainer.lag}",
        flush=True,
    )
    return 0
