"""Moving a Spark checkpoint back with its sink head (``exactlyonce rewind``).

A streaming query's checkpoint keeps, per batch, the planned offsets (``offsets/<batch>``)
and the completion (``commits/<batch>``). On a restart Spark plans the batch after the last
commit, starting from that batch's offsets. So after the sink head moved back to epoch N:

- N >= 0: deleting ``offsets/<b>`` and ``commits/<b>`` for every batch b > N makes Spark
  re-run from batch N + 1, reading from the offsets batch N ended at: every record of the old
  batches above N comes again (possibly grouped into fewer batches; their IDs are the same).
  The source's own log (``sources/``) stays: a file source's offsets are positions in it.
  The query id (``metadata``) stays too. Refused when ``offsets/N`` is gone (Spark keeps
  ``spark.sql.streaming.minBatchesToRetain`` batches, 100 by default) or the query keeps
  state (``state/``: its versions above N + 1 would stay behind): rewind to -1 instead;
- N = -1: the checkpoint directory goes; the next run starts at batch 0 under a new query id
  (the rewound head has none, so it binds the new one) and reads the source from its start.

Only a local checkpoint (a path, or ``file:``) is changed here; for any other (``s3a://``,
``hdfs://``...) :class:`CheckpointPlan` says what the user must delete.
"""

from __future__ import annotations

import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlparse

from exactlyonce.faults import crash_point

LOGS = ("offsets", "commits")
_BATCH = re.compile(r"\.?(\d+)(\.crc)?")


@dataclass(frozen=True)
class CheckpointPlan:
    """What rewinding ``checkpoint`` to ``epoch`` takes. ``files``: the batch files to delete
    (N >= 0; checksum files included); ``refusal``: why it cannot be done exactly."""

    checkpoint: str
    epoch: int
    local: Path | None
    files: list[Path] = field(default_factory=list)
    refusal: str | None = None

    @property
    def exists(self) -> bool:
        return self.local is not None and self.local.exists()

    @property
    def pending(self) -> bool:
        """Whether the checkpoint still has to follow a head already at the epoch (a rewind
        cut short after the sink's step): batches above it, or for -1 the directory."""
        return bool(self.batches_above) if self.epoch >= 0 else self.exists

    @property
    def batches_above(self) -> list[int]:
        return sorted({batch_of(p) for p in self.files if p.parent.name == "offsets"})

    def describe(self) -> str:
        """What the plan does (or, for a checkpoint not on this machine, what the user must
        do), as one sentence."""
        if self.epoch < 0:
            what = f"delete the checkpoint {self.checkpoint}"
        else:
            what = (
                f"delete offsets/<b> and commits/<b> of every batch b > {self.epoch} in the "
                f"checkpoint {self.checkpoint}"
            )
        if self.local is None:
            return f"YOU MUST {what} before the next run (it is not a local path)"
        if not self.exists:
            return f"no checkpoint at {self.checkpoint}: nothing to do there"
        if self.epoch < 0:
            return what[0].upper() + what[1:]
        batches = self.batches_above
        shown = ", ".join(map(str, batches)) if batches else "none"
        return f"{what[0].upper() + what[1:]} (batches: {shown})"


def local_path(checkpoint: str) -> Path | None:
    """The checkpoint as a local path, or None when it lives elsewhere."""
    parsed = urlparse(checkpoint)
    if parsed.scheme in ("", "file"):
        return Path(parsed.path if parsed.scheme else checkpoint)
    if len(parsed.scheme) == 1:  # a Windows drive letter
        return Path(checkpoint)
    return None


def batch_of(path: Path) -> int:
    match = _BATCH.fullmatch(path.name)
    assert match is not None
    return int(match.group(1))


def plan_rewind(checkpoint: str, epoch: int) -> CheckpointPlan:
    local = local_path(checkpoint)
    if local is None or not local.exists() or epoch < 0:
        return CheckpointPlan(checkpoint, epoch, local)
    files = [
        p
        for log in LOGS
        if (local / log).is_dir()
        for p in sorted((local / log).iterdir())
        if _BATCH.fullmatch(p.name) and batch_of(p) > epoch
    ]
    refusal = None
    if (local / "state").exists():
        refusal = (
            f"the query keeps state ({local / 'state'}): its state versions above batch "
            f"{epoch + 1} would outlive the rewind. Rewind to -1 (the checkpoint is deleted) "
            "instead"
        )
    elif not (local / "offsets" / str(epoch)).exists():
        refusal = (
            f"the checkpoint no longer holds batch {epoch} (offsets/{epoch}; Spark keeps "
            "spark.sql.streaming.minBatchesToRetain batches), so Spark could not restart "
            f"after it. Rewind to a batch it still holds, or to -1"
        )
    return CheckpointPlan(checkpoint, epoch, local, files, refusal)


def rewind_checkpoint(plan: CheckpointPlan) -> None:
    """Carry ``plan`` out on a local checkpoint (idempotent): newest batches first, so a
    crash halfway leaves a checkpoint that still ends at a batch."""
    if plan.local is None or not plan.exists or plan.refusal is not None:
        return
    if plan.epoch < 0:
        shutil.rmtree(plan.local)
        return
    for path in sorted(plan.files, key=lambda p: (-batch_of(p), p.parent.name == "offsets")):
        path.unlink(missing_ok=True)
        crash_point("rewind_mid_checkpoint", plan.epoch)


__all__ = ["CheckpointPlan", "local_path", "plan_rewind", "rewind_checkpoint"]
