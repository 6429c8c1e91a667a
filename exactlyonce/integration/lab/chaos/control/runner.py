"""A run of the negative control: the pipeline file's source, trigger and Spark settings,
written by :class:`~.writer.ControlWriter` to the control's target instead of the sink.
``exactlyonce chaos`` starts it as it starts ``exactlyonce run`` (a process group of its
own, SIGKILLed by the faults)::

    python -m exactlyonce.integration.lab.chaos.control.runner PIPELINE.yaml \\
        --name NAME --checkpoint DIR --until-idle SECONDS

Prints one line per batch written; exits 0 when the query ended or went idle, 1 when it
failed.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence

from exactlyonce.integration.config import load_config
from exactlyonce.integration.lab.chaos.control.target import control
from exactlyonce.integration.lab.chaos.control.writer import ControlWriter
from exactlyonce.secrets import scrub

POLL_S = 0.5


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m exactlyonce.integration.lab.chaos.control.runner")
    p.add_argument("config")
    p.add_argument("--name", required=True, help="the control's table, stream, topic or index")
    p.add_argument("--checkpoint", required=True, help="the control's own Spark checkpoint")
    p.add_argument("--until-idle", type=float, default=15.0, metavar="SECONDS")
    args = p.parse_args(argv)
    cfg = load_config(args.config)
    writer = ControlWriter(control(cfg, args.name))
    from exactlyonce.integration.spark import session

    spark = session(
        app_name=f"{cfg.query_name}-control",
        master=cfg.spark.master,
        extra={"spark.ui.showConsoleProgress": "false", **cfg.spark.conf},
        data_source=False,
    )
    try:
        stream = cfg.source.build(spark).writeStream.foreachBatch(writer)
        stream = stream.option("checkpointLocation", args.checkpoint)
        trigger = cfg.trigger_kwargs()
        if trigger.get("available_now"):
            stream = stream.trigger(availableNow=True)
        elif trigger.get("processing_time"):
            stream = stream.trigger(processingTime=trigger["processing_time"])
        query = stream.start()
        print(f"started {cfg.query_name} (control) -> {writer.target.describe()}", flush=True)
        seen, last = 0, time.monotonic()
        while query.isActive:
            status = query.status
            busy = status.get("isTriggerActive") and status.get("isDataAvailable")
            if writer.batches != seen or busy:
                seen, last = writer.batches, time.monotonic()
            if time.monotonic() - last >= args.until_idle:
                query.stop()
                break
            time.sleep(POLL_S)
        failure = query.exception()
        if failure is not None:
            text = scrub(str(failure), *cfg.sink.secrets()).strip().splitlines()
            print(f"control query failed: {text[-1] if text else 'unknown'}", file=sys.stderr)
            return 1
        print(f"stopped {cfg.query_name} (control) after {writer.batches} batch(es)", flush=True)
        return 0
    finally:
        spark.stop()


if __name__ == "__main__":
    sys.exit(main())
