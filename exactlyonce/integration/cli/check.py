"""``exactlyonce check pipeline.yaml``: validate a pipeline file and preflight its sink."""

from __future__ import annotations

import argparse

from exactlyonce.integration.cli.common import EXIT_OK
from exactlyonce.integration.config import load_config


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    check = sub.add_parser("check", help="validate a pipeline file and preflight its sink")
    check.add_argument("config")
    check.set_defaults(func=cmd_check)


def cmd_check(args: argparse.Namespace) -> int:
    cfg = load_config(args.config)
    sink = cfg.build_sink()
    head = sink.head()
    where = "no head yet" if head is None else f"head epoch {head.epoch}, {head.num_shards} shards"
    print(f"OK {cfg.query_name}: {cfg.source.type} -> {sink.sink_name} ({where})")
    return EXIT_OK
