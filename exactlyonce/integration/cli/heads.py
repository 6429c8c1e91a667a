"""``exactlyonce heads pipeline.yaml|SINK-URL [--json]``: where the query stands, read-only.

The target is a pipeline file, or a sink URL with ``--query-name`` (and ``--catalog
redis://...`` for the dedup catalog's Redis), in the forms
:mod:`exactlyonce.integration.config.urls` gives::

    exactlyonce heads 'postgresql://user:pw@host/db?table=events' --query-name clicks \
        --catalog redis://host:6379/0

Prints the sink head (epoch, Spark query id, shard count, when it last moved), the shard
commits still held above it, the dedup catalog (live IDs, generations, bytes) and, for a
pipeline with a ``buffer:``, the drain offsets and the lag. Creates nothing: a query that
never ran shows "no head yet". ``--json``: one JSON document, shaped as
:mod:`exactlyonce.integration.heads` describes. ``--starting-offsets`` (a pipeline file with a
Kafka source): only Spark's ``startingOffsets`` JSON from the sink's source frontiers
(:mod:`exactlyonce.integration.resume`).
"""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING, Any

from exactlyonce.errors import ConfigError
from exactlyonce.integration.cli.common import EXIT_OK
from exactlyonce.integration.config import load_config
from exactlyonce.integration.config.urls import is_sink_url, sink_from_url
from exactlyonce.integration.heads import query_state
from exactlyonce.integration.resume import resume_offsets
from exactlyonce.secrets import redact_dsn

if TYPE_CHECKING:
    from exactlyonce.connectors.base import ExactlyOnceSink


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    heads = sub.add_parser(
        "heads", help="show the query's sink head, shard commits, catalog and drain lag"
    )
    heads.add_argument(
        "config",
        metavar="PIPELINE|SINK-URL",
        help="a pipeline file, or a sink URL (postgresql://, redis://, kafka://, "
        "elasticsearch://...; see the README)",
    )
    heads.add_argument("--query-name", help="with a sink URL: the query's query_name")
    heads.add_argument(
        "--catalog", metavar="REDIS-URL", help="with a sink URL: the dedup catalog's Redis"
    )
    heads.add_argument("--json", action="store_true", help="one JSON document")
    heads.add_argument(
        "--starting-offsets",
        action="store_true",
        help="with a pipeline file whose source is Kafka: print only Spark's startingOffsets "
        "JSON that resumes a new checkpoint where the sink's source frontiers stand "
        "(Real-time Mode writers); refused when the sink holds none",
    )
    heads.set_defaults(func=cmd_heads)


def cmd_heads(args: argparse.Namespace) -> int:
    if args.starting_offsets:
        return print_starting_offsets(args)
    state = query_state(target_sink(args))
    if args.json:
        print(json.dumps(state, indent=2), flush=True)
        return EXIT_OK
    if is_sink_url(args.config):
        print(f"sink URL: {redact_dsn(args.config)}")
    print("\n".join(describe(state)), flush=True)
    return EXIT_OK


def print_starting_offsets(args: argparse.Namespace) -> int:
    """``--starting-offsets``: the JSON alone, so ``$(exactlyonce heads ...)`` can use it."""
    if is_sink_url(args.config):
        raise ConfigError(
            "--starting-offsets", "needs a pipeline file: it reads the Kafka source's topics"
        )
    config = load_config(args.config)
    sink = target_sink(args)
    print(json.dumps(resume_offsets(config, sink), separators=(",", ":")), flush=True)
    return EXIT_OK


def target_sink(args: argparse.Namespace) -> ExactlyOnceSink:
    """The sink of the command's pipeline file or sink URL, built without preflight."""
    if is_sink_url(args.config):
        return sink_from_url(args.config, query_name=args.query_name, catalog=args.catalog)
    for option in ("query_name", "catalog"):
        if getattr(args, option) is not None:
            flag = "--" + option.replace("_", "-")
            raise ConfigError(flag, "only with a sink URL (a pipeline file names its own)")
    return load_config(args.config).build_sink(check=False)


def describe(state: dict[str, Any]) -> list[str]:
    """The state as lines for a terminal."""
    lines = [f"query {state['query_name']} -> {state['sink']} ({state['kind']})"]
    head = state["head"]
    if head is None:
        lines.append("  head: no head yet")
    else:
        query_id = head["spark_query_id"] or "none bound"
        lines.append(
            f"  head: epoch {head['epoch']}, Spark query {query_id}, {head['num_shards']} "
            f"shards, moved {head['advanced_at'] or 'at an unknown time'}"
        )
    lines.append(f"  shard commits above the head: {_commits(state['shard_commits'])}")
    lines.append(f"  catalog: {_catalog(state['catalog'])}")
    buffer = state["buffer"]
    if buffer is not None:
        positions = ", ".join(f"[{p}] {o}" for p, o in buffer["positions"].items()) or "none"
        lag = buffer["lag"]
        behind = (
            "no buffer topic yet"
            if lag is None
            else f"{lag['records']} records, {lag['seconds']:.1f}s behind"
        )
        lines.append(f"  buffer {buffer['topic']} -> {buffer['drain_target']}")
        lines.append(f"    drain offsets: {positions}")
        lines.append(f"    lag: {behind}")
    return lines


def _commits(commits: dict[str, list[int]] | None) -> str:
    if commits is None:
        return "not listed for this sink"
    if not commits:
        return "none"
    return "; ".join(
        f"epoch {e}: shard{'s' if len(s) > 1 else ''} {', '.join(map(str, s))}"
        for e, s in commits.items()
    )


def _catalog(catalog: dict[str, Any] | None) -> str:
    if catalog is None:
        return "off (dedup disabled)"
    if not catalog["exists"]:
        return "none yet"
    gens = catalog["generations"]
    span = f"{gens[0]}-{gens[-1]}" if len(gens) > 1 else (str(gens[0]) if gens else "none")
    per_id = catalog["bytes_per_id"]
    size = f"{catalog['bytes']} bytes" + (f" ({per_id:.1f} per ID)" if per_id else "")
    return (
        f"{catalog['live_ids']} live IDs in generations {span} over {catalog['shards']} "
        f"shards, {size}"
    )
