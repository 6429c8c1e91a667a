"""What every ``exactlyonce`` command shares: exit codes, printing an error, the metrics
port."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from exactlyonce.errors import ConfigError

if TYPE_CHECKING:
    from exactlyonce.integration.config import PipelineConfig

EXIT_OK, EXIT_FAILED, EXIT_CONFIG, EXIT_INTERRUPTED = 0, 1, 2, 130


def err(message: str) -> None:
    """Print ``message`` to stderr at once (the caller scrubs secrets out of it)."""
    print(message, file=sys.stderr, flush=True)


def add_metrics_port(parser: argparse.ArgumentParser) -> None:
    """``--metrics-port N``: serve Prometheus metrics on port N (wins over ``metrics_port``)."""
    parser.add_argument(
        "--metrics-port",
        type=int,
        metavar="N",
        help="serve Prometheus metrics on http://0.0.0.0:N/metrics (overrides metrics_port)",
    )


def metrics_port(args: argparse.Namespace, cfg: PipelineConfig) -> int | None:
    """The port of ``--metrics-port`` (checked), else the pipeline file's ``metrics_port``."""
    port: int | None = getattr(args, "metrics_port", None)
    if port is None:
        return cfg.metrics_port
    if not 1 <= port <= 65535:
        raise ConfigError("--metrics-port", f"a port from 1 to 65535, got {port}")
    return port
