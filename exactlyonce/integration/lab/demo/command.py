"""The kill -9 demo (``make demo``): Kafka -> Spark -> PostgreSQL and Kafka -> Spark -> Kafka,
each SIGKILLed mid-stream and restarted, still write exactly once.

This module is its command line: parse the options, check the two pipeline files, then fresh
state (:mod:`.reset`), the at-least-once input (:mod:`exactlyonce.integration.lab.events`,
:mod:`.producer`), runs and kills of each pipeline (:mod:`.runs`) and both audits
(:mod:`.audit`, :mod:`.topic_audit`), in that order, with the client libraries' log lines in a
file (:mod:`.logs`). Exit 0 only if both audits say exactly once.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from exactlyonce.errors import ConfigError
from exactlyonce.integration.config import PipelineConfig, load_config
from exactlyonce.integration.envfile import service_env
from exactlyonce.integration.lab.demo.audit import print_audit, read_audit
from exactlyonce.integration.lab.demo.logs import DEMO_LOG, logs_to
from exactlyonce.integration.lab.demo.pipeline import demo_pipelines
from exactlyonce.integration.lab.demo.reset import reset_state
from exactlyonce.integration.lab.demo.runs import head_epoch, kill_all, run_with_kills
from exactlyonce.integration.lab.demo.topic_audit import print_topic_audit, read_topic_audit
from exactlyonce.integration.lab.echo import print_dedup_totals
from exactlyonce.integration.lab.events import Expected, generate
from exactlyonce.integration.lab.upstream.producer import produce


def main(argv: Sequence[str] | None = None) -> int:
    """Run the demo; 0 if exactly once, 1 if an audit failed, 2 on a config error."""
    args = _parser().parse_args(argv)
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(1 << 31)
    print(f"seed {seed} (replay with --seed {seed})", flush=True)
    began = time.monotonic()
    os.environ.update(service_env())
    try:
        pg, kafka = load_config(args.pg_config), load_config(args.kafka_config)
        demo_pipelines(pg, kafka)
    except ConfigError as exc:
        print(f"config error: {exc}", file=sys.stderr)
        return 2

    log_dir = Path(pg.checkpoint).parent.parent / "logs"
    log_dir.mkdir(parents=True, exist_ok=True)
    with logs_to(log_dir / DEMO_LOG):  # the clients' lines: not on the terminal
        expected = _fresh_input(pg, kafka, seed, args.events)
        pg_kills, kafka_kills = _run_both(pg, kafka, args, seed, log_dir, expected.records)
        print_dedup_totals()
        ok = _audits(pg, kafka, expected, (pg_kills, kafka_kills))
    print(f"RESULT: {'EXACTLY ONCE' if ok else 'FAILED'}")
    print(f"seed {seed}, {time.monotonic() - began:.0f} s, logs in {log_dir}")
    return 0 if ok else 1


def _fresh_input(pg: PipelineConfig, kafka: PipelineConfig, seed: int, events: int) -> Expected:
    """Reset the state, produce the seeded input and say what it holds."""
    source, _, _ = demo_pipelines(pg, kafka)
    reset_state(pg, kafka)
    plan = generate(random.Random(seed), events)
    began = time.monotonic()
    produce(source.bootstrap_servers, str(source.topic), plan.records)
    expected = Expected.of(plan)
    print(
        f"{expected.describe()}; produced to {source.topic} at least once "
        f"(acks=all, no idempotence) in {time.monotonic() - began:.1f} s",
        flush=True,
    )
    return expected


def _run_both(
    pg: PipelineConfig,
    kafka: PipelineConfig,
    args: argparse.Namespace,
    seed: int,
    log_dir: Path,
    input_records: int,
) -> tuple[int, int]:
    """Both pipelines' runs and kills, side by side (one thread each, own seeded schedule,
    own progress of rows read against the ``input_records``); the kills done. A failed run
    of either ends the demo, its other runs killed."""
    jobs = ((pg, args.pg_config, "pg"), (kafka, args.kafka_config, "kafka"))
    with ThreadPoolExecutor(max_workers=2) as pool:
        futures = [
            pool.submit(
                run_with_kills,
                cfg,
                path,
                args.kills,
                random.Random(seed + i),
                log_dir,
                name,
                input_records,
            )
            for i, (cfg, path, name) in enumerate(jobs, start=1)
        ]
        try:
            pg_kills, kafka_kills = (f.result() for f in futures)
        except BaseException:
            kill_all()
            raise
    return pg_kills, kafka_kills


def _audits(
    pg: PipelineConfig, kafka: PipelineConfig, expected: Expected, kills: tuple[int, int]
) -> bool:
    """Both audits printed; True if both say exactly once."""
    _, _, out = demo_pipelines(pg, kafka)
    table = read_audit(
        pg,
        expected.ids,
        expected_dead_letters=expected.null_keys,
        input_records=expected.records,
        kills=kills[0],
    )
    print_audit(table, result=False)
    topic = read_topic_audit(
        out.bootstrap_servers,
        out.topic,
        out.dead_letter_topic_name,
        kafka.query_name,
        expected.ids,
        expected.null_keys,
    )
    topic.head_epoch = head_epoch(kafka.build_sink(check=False))
    topic.kills = kills[1]
    print_topic_audit(topic)
    return table.ok and topic.ok


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m exactlyonce.integration.lab.demo",
        description=__doc__.splitlines()[0] if __doc__ else None,
    )
    p.add_argument("--pg-config", default="examples/demo/kafka_to_pg.yaml")
    p.add_argument("--kafka-config", default="examples/demo/kafka_to_kafka.yaml")
    p.add_argument("--events", type=int, default=6000, help="distinct events produced")
    p.add_argument("--kills", type=int, default=3, help="SIGKILLs per pipeline")
    p.add_argument("--seed", type=int)
    return p
