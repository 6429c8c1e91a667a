"""The kill -9 demo (``make demo``): a pipeline SIGKILLed mid-stream still writes exactly once.

This module is its command line: parse the options, check the pipeline file, then fresh
state (:mod:`.reset`), input (:mod:`.inputs`), runs and kills (:mod:`.runs`) and the audit
(:mod:`.audit`), in that order. Exit 0 only if the audit says exactly once.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from exactlyonce.errors import ConfigError
from exactlyonce.integration.config import FilesSourceConfig, PipelineConfig, load_config
from exactlyonce.integration.demo.audit import print_audit, read_audit
from exactlyonce.integration.demo.echo import print_dedup_totals
from exactlyonce.integration.demo.inputs import Expected, generate, write_files
from exactlyonce.integration.demo.pipeline import demo_source
from exactlyonce.integration.demo.reset import reset_state
from exactlyonce.integration.demo.runs import run_with_kills
from exactlyonce.integration.services import service_env


def main(argv: Sequence[str] | None = None) -> int:
    """Run the demo; 0 if exactly once, 1 if the audit failed, 2 on a config error."""
    args = _parser().parse_args(argv)
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(1 << 31)
    print(f"seed {seed} (replay with --seed {seed})", flush=True)
    began = time.monotonic()
    os.environ.update(service_env())
    try:
        cfg = load_config(args.config)
        source = demo_source(cfg)
    except ConfigError as exc:
        print(f"config error: {exc}", file=sys.stderr)
        return 2

    expected = _fresh_input(cfg, source, seed, args.files, args.rows_per_file)
    log_dir = Path(cfg.checkpoint).parent / "logs"
    log_dir.mkdir(parents=True, exist_ok=True)
    kills = run_with_kills(cfg, args.config, args.kills, random.Random(seed + 1), log_dir)

    audit = read_audit(
        cfg,
        expected.ids,
        expected_dead_letters=expected.null_keys,
        input_records=expected.records,
        kills=kills,
    )
    print_dedup_totals()
    print_audit(audit)
    print(f"seed {seed}, {time.monotonic() - began:.0f} s, logs in {log_dir}")
    return 0 if audit.ok else 1


def _fresh_input(
    cfg: PipelineConfig, source: FilesSourceConfig, seed: int, files: int, rows_per_file: int
) -> Expected:
    """Reset the state, write the seeded input and say what it holds."""
    reset_state(cfg, source)
    batches = generate(random.Random(seed), files, rows_per_file)
    write_files(Path(source.path), batches)
    expected = Expected.of(batches)
    print(expected.describe(), flush=True)
    return expected


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m exactlyonce.integration.demo",
        description=__doc__.splitlines()[0] if __doc__ else None,
    )
    p.add_argument("--config", default="examples/pipeline.yaml")
    p.add_argument("--files", type=int, default=24)
    p.add_argument("--rows-per-file", type=int, default=500)
    p.add_argument("--kills", type=int, default=3)
    p.add_argument("--seed", type=int)
    return p
