"""``exactlyonce rewind pipeline.yaml --to-epoch N [--yes] [--json]``: move a query back to
epoch N.

What it does, in this order (each step idempotent, so a rewind cut short is finished by
running it again):

1. the dedup catalog is dropped (it cannot forget single epochs once the head passed them;
   the next start rebuilds it from the sink, or starts it empty where the sink's unique key
   keeps writes exactly-once, as after ``reset-head``). First, because a catalog that still
   marks IDs above N would drop them on the re-run as duplicates: lost;
2. the sink removes its records above N and moves its head back to N with the Spark query id
   cleared (:meth:`~exactlyonce.connectors.base.rewind.Rewind.rewind_to`);
3. the Spark checkpoint is moved back to match (:mod:`exactlyonce.integration.checkpoint`):
   batches above N deleted, or for N = -1 the whole checkpoint.

Cut short (killed) anywhere, running the rewind again finishes it: before step 2's end the
head is still above N, so it runs whole again (dropping an absent catalog, deleting what is
left above N); after it the head is at N and the checkpoint still holds batches above N (for
-1: still exists), which counts as "not done yet" (``CheckpointPlan.pending``). What is NOT
safe is to start the stream from a rewind cut short after step 2: Spark would go on after
its old last batch while the sink lost the epochs in between. So a rewind that did not print
its ``rewound ...`` line must be run again before the stream.
tests/crash/test_rewind_crash.py kills it at each step (``rewind_after_catalog``,
``rewind_mid_delete``, ``rewind_after_sink``, ``rewind_mid_checkpoint``: exactlyonce.faults).

Refused, with nothing changed: without ``--yes`` (it prints what it would remove, per place
and epoch); when N is not below the head (unless a rewind to N was cut short before the
checkpoint) or below -1; when the sink cannot remove its records by epoch exactly (Kafka, a
buffered pipeline, upserts, Redis hash/string writes: each says why); when the checkpoint
cannot follow (a stateful query, a batch Spark no longer keeps); with
``on_catalog_loss: fail`` (the next start would refuse the dropped catalog).

``--json`` prints one document instead of the lines (errors still go to stderr; exit codes
are the same), keyed like ``heads --json``::

    {
      "query_name": str, "sink": str, "kind": str,
      "from_epoch": int | null (the head before; null when refused before reading it),
      "to_epoch": int,
      "applied": bool (false: a dry run without --yes, or refused),
      "refused": null | str (why nothing was changed),
      "removals": null (refused) | [{"what": str, "total": int,
                                     "per_epoch": {"<epoch>": int}}, ...]
                  (what was removed, or in a dry run what would be),
      "catalog": null (dedup off) | {"dropped": bool, "keys_dropped": int | null},
      "spark_query_id_cleared": bool,
      "checkpoint": {"path": str, "action": "rewound" | "deleted" | "none" | "left to you",
                     "batches_removed": [int, ...], "what": str}
    }
"""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING, Any

from exactlyonce.connectors.base import NO_EPOCH, Removal
from exactlyonce.faults import crash_point
from exactlyonce.integration.checkpoint import CheckpointPlan, plan_rewind, rewind_checkpoint
from exactlyonce.integration.cli.common import EXIT_CONFIG, EXIT_OK, err
from exactlyonce.integration.config import load_config
from exactlyonce.integration.maintenance import drop_catalog

if TYPE_CHECKING:
    from exactlyonce.connectors.base import ExactlyOnceSink, Head


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    rewind = sub.add_parser(
        "rewind", help="move the query's head back to an epoch, removing what came after"
    )
    rewind.add_argument("config")
    rewind.add_argument(
        "--to-epoch",
        type=int,
        required=True,
        metavar="N",
        help="the epoch to go back to (-1: before the first)",
    )
    rewind.add_argument("--yes", action="store_true", help="really rewind")
    rewind.add_argument(
        "--json", action="store_true", help="one JSON document (what was, or would be, done)"
    )
    rewind.set_defaults(func=cmd_rewind)


def cmd_rewind(args: argparse.Namespace) -> int:
    cfg = load_config(args.config)
    sink = cfg.build_sink(check=False)
    epoch: int = args.to_epoch
    refusal = _sink_refusal(sink, epoch)
    head = sink.peek_head() if refusal is None else None
    checkpoint = plan_rewind(cfg.checkpoint, epoch)
    before = checkpoint_json(checkpoint)  # what it is and gets, before anything changes
    if refusal is None:
        refusal = _position_refusal(head, epoch, checkpoint) or checkpoint.refusal
    if refusal is not None:
        if args.json:
            _print_json(rewind_json(sink, head, epoch, before, refused=refusal))
        err(f"refusing to rewind {sink.query_name!r} on {sink.sink_name}: {refusal}")
        return EXIT_CONFIG
    assert head is not None
    if not args.yes:
        removals = sink.rewinder().removals_above(epoch)
        if args.json:
            _print_json(rewind_json(sink, head, epoch, before, removals, applied=False))
        else:
            print("\n".join(plan_lines(sink, head, epoch, removals, checkpoint)))
        err(
            "refusing to rewind without --yes: nothing was changed. Stop the query (and its "
            "drainer) first, then run this again with --yes"
        )
        return EXIT_CONFIG
    if not args.json:
        removals = sink.rewinder().removals_above(epoch)
        print("\n".join(plan_lines(sink, head, epoch, removals, checkpoint)))
    dropped, removed = rewind(sink, epoch, checkpoint)
    if args.json:
        _print_json(rewind_json(sink, head, epoch, before, removed, dropped=dropped))
        return EXIT_OK
    print(f"rewound {sink.query_name!r} to epoch {epoch}: removed {_totals(removed)}", end="")
    print(f"; {dropped} catalog keys dropped" if sink.dedup_config is not None else "")
    print("\n".join(procedure(epoch, checkpoint)), flush=True)
    return EXIT_OK


def rewind(
    sink: ExactlyOnceSink, epoch: int, checkpoint: CheckpointPlan
) -> tuple[int, list[Removal]]:
    """The rewind's three steps, in the order the module docstring gives; returns the
    catalog keys dropped and what the sink removed."""
    dropped = drop_catalog(sink)  # first: a catalog must never mark IDs above the head
    crash_point("rewind_after_catalog", epoch)
    removed = sink.rewinder().rewind_to(epoch)
    crash_point("rewind_after_sink", epoch)
    rewind_checkpoint(checkpoint)
    return dropped, removed


def rewind_json(
    sink: ExactlyOnceSink,
    head: Head | None,
    epoch: int,
    checkpoint: dict[str, Any],
    removals: list[Removal] | None = None,
    *,
    applied: bool = True,
    dropped: int | None = None,
    refused: str | None = None,
) -> dict[str, Any]:
    """The rewind as one document, keyed like ``heads --json`` (see the README): what was
    removed (``applied``), or would be (a dry run), or why it was refused."""
    catalog: dict[str, Any] | None = None
    if sink.dedup_config is not None:
        catalog = {"dropped": applied and refused is None, "keys_dropped": dropped}
    return {
        "query_name": sink.query_name,
        "sink": sink.sink_name,
        "kind": sink.kind,
        "from_epoch": None if head is None else head.epoch,
        "to_epoch": epoch,
        "applied": applied and refused is None,
        "refused": refused,
        "removals": None if removals is None else [r.to_json() for r in removals],
        "catalog": catalog,
        "spark_query_id_cleared": applied and refused is None,
        "checkpoint": checkpoint,
    }


def checkpoint_json(checkpoint: CheckpointPlan) -> dict[str, Any]:
    """The checkpoint's part of the document, from the plan (made before the rewind)."""
    if checkpoint.local is None:
        action = "left to you"
    elif not checkpoint.exists:
        action = "none"
    else:
        action = "deleted" if checkpoint.epoch < 0 else "rewound"
    return {
        "path": checkpoint.checkpoint,
        "action": action,
        "batches_removed": checkpoint.batches_above,
        "what": checkpoint.describe(),
    }


def _print_json(document: dict[str, Any]) -> None:
    print(json.dumps(document, indent=2), flush=True)


def _sink_refusal(sink: ExactlyOnceSink, epoch: int) -> str | None:
    if epoch < NO_EPOCH:
        return f"--to-epoch {epoch} is negative; use -1 to go back to before the first epoch"
    refusal = sink.rewinder().refusal()
    if refusal is not None:
        return refusal
    dedup = sink.dedup_config
    if dedup is not None and dedup.on_catalog_loss == "fail" and epoch > NO_EPOCH:
        return (
            "the rewind drops the dedup catalog, and with on_catalog_loss: fail the next start "
            "would refuse to run without it. Set on_catalog_loss: rebuild for that start"
        )
    return None


def _position_refusal(head: Head | None, epoch: int, checkpoint: CheckpointPlan) -> str | None:
    if head is None:
        return "the query has no head yet: nothing was committed, nothing to rewind"
    if epoch > head.epoch:
        return f"epoch {epoch} is above the head ({head.epoch}): a rewind only goes back"
    if epoch == head.epoch and not checkpoint.pending:
        return f"the head is at epoch {epoch} already: nothing to rewind"
    return None


def plan_lines(
    sink: ExactlyOnceSink,
    head: Head,
    epoch: int,
    removals: list[Removal],
    checkpoint: CheckpointPlan,
) -> list[str]:
    """What the rewind removes and changes, one line per place."""
    lines = [f"rewind of {sink.query_name!r} on {sink.sink_name}: head {head.epoch} -> {epoch}"]
    for removal in removals:
        lines.append(f"  {removal.what}: {_per_epoch(removal)}")
    if sink.dedup_config is not None:
        lines.append(
            "  dedup catalog: dropped; the next start rebuilds it from the sink (or starts it "
            "empty where the sink's unique key keeps writes exactly-once)"
        )
    lines.append("  Spark query id: cleared; the next run binds its own")
    lines.append(f"  Spark checkpoint: {checkpoint.describe()}")
    return lines


def _per_epoch(removal: Removal) -> str:
    if not removal.total:
        return "none"
    counts = ", ".join(f"epoch {e}: {n}" for e, n in sorted(removal.per_epoch.items()))
    return f"{removal.total} ({counts})"


def _totals(removals: list[Removal]) -> str:
    return ", ".join(f"{r.total} {r.what}" for r in removals)


def procedure(epoch: int, checkpoint: CheckpointPlan) -> list[str]:
    """What the user does next, after the rewind."""
    lines = []
    if checkpoint.local is None:
        lines.append(f"Spark checkpoint: {checkpoint.describe()}.")
    elif epoch < 0:
        lines.append(
            f"Spark checkpoint {checkpoint.checkpoint} deleted: the next run starts at batch 0 "
            "under a new Spark query id and reads the source from its start."
        )
    else:
        lines.append(
            f"Spark checkpoint {checkpoint.checkpoint} rewound to batch {epoch}: the next run "
            f"re-runs from batch {epoch + 1} with the same Spark query id."
        )
    lines.append(
        "Do not restore an older copy of the checkpoint, and do not point the query at "
        "another one: batches it numbers at or below the head would be skipped."
    )
    return lines
