"""The Kafka sink's task on Spark's data source path: one Spark partition of an epoch, in ONE
transaction, from a producer of its own.

On ``format("exactlyonce")`` a task gets the upstream plan's partition as it is, not a shard
of IDs (see :mod:`exactlyonce.integration.datasource`). :class:`KafkaPartitionTask` is the
shard task of :mod:`.task` keyed by the Spark partition instead:

- its ``transactional.id`` is ``eo-<query>-<sha1(sink)[:8]>-p<partition>``
  (:func:`.protocol.partition_transactional_id`): a re-run of (epoch, partition) fences the
  older attempt and aborts its open transaction; its barrier key ``...|sync|p<partition>``
  lets the driver find and fence every such producer at a start;
- it reads its whole input first, and takes its fingerprint (:mod:`.fingerprint`);
- the commit marker of (epoch, partition), inside the data transaction, and the
  confirmation carry that fingerprint. A re-run that finds its partition committed (the
  broker hides aborted records: the marker is trusted) with the SAME fingerprint writes
  nothing and only re-marks, in the catalog, the IDs that attempt wrote; with ANOTHER
  fingerprint Spark split the epoch differently: :class:`~exactlyonce.errors.EpochSplitError`,
  nothing is written;
- before writing, it registers the fingerprint and claims its IDs in the catalog
  (:mod:`exactlyonce.dedup.claims`): an ID another partition of the epoch claimed is that
  partition's to write. The IDs are marked only after the commit (invariant 1).

Headers, markers and confirmations put the partition where a shard task puts its shard, so
the consumption recipe (:mod:`.reader`) and the catalog rebuild read both alike.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import pyarrow as pa

from exactlyonce.connectors.base import PAYLOAD_COLUMN, DeadLetter, ShardTask
from exactlyonce.connectors.base.report import TaskResult
from exactlyonce.connectors.kafka.fingerprint import input_fingerprint
from exactlyonce.connectors.kafka.protocol import (
    ID_COLUMN,
    partition_sync_key,
    partition_transactional_id,
)
from exactlyonce.connectors.kafka.target import KafkaTarget
from exactlyonce.connectors.kafka.task import KafkaShardTask
from exactlyonce.errors import EpochSplitError, TaskStateError


class KafkaPartitionTask(KafkaShardTask):
    """One Spark partition's transaction for one epoch (see the module docstring)."""

    def __init__(self, target: KafkaTarget, epoch: int, partition: int) -> None:
        super().__init__(target, epoch)
        if not target.hides_aborted or target.dedup is None:
            raise TaskStateError(
                "a Kafka partition task needs a broker that hides aborted records and the "
                "catalog (the driver refuses others)"
            )
        self.partition = partition
        self.shard = partition  # in the headers, marker and confirmation keys
        self.shard_markers = False
        self.letter_scope = partition
        self.fingerprint = ""
        self.committed_earlier = False

    @property
    def where(self) -> str:
        return f"{self.t.query_name} epoch {self.epoch} partition {self.partition}"

    def run(self, batches: Iterator[pa.RecordBatch]) -> TaskResult:
        """Read the whole input (its fingerprint is needed before the first claim), then
        write it as a shard task does."""
        rows = [b for b in batches if b.num_rows]
        self.fingerprint = input_fingerprint(rows, ID_COLUMN, PAYLOAD_COLUMN)
        return super().run(iter(rows))

    def write(self, batch: pa.RecordBatch) -> None:
        ShardTask.write(self, batch)  # rows of any catalog shard: no one-shard check

    # -- KafkaShardTask ----------------------------------------------------------------

    def _producer_config(self) -> dict[str, Any]:
        txn_id = partition_transactional_id(self.t.query_name, self.t.sink_name, self.partition)
        return self.t.producer_config(self.partition, txn_id)

    def _sync_key(self) -> str:
        return partition_sync_key(self.t.query_name, self.t.sink_name, self.partition)

    def _committed_earlier(self) -> bool:
        """After fencing: did an earlier attempt commit this partition (then with the same
        input, or the epoch is refused)? Then registers the input and claims from now on."""
        confirmed, marker = self._earlier_attempts()
        found = confirmed if confirmed is not None else marker
        if found is not None and found.get("fingerprint") != self.fingerprint:
            raise self._split(str(found.get("fingerprint")), "committed")
        if confirmed is None and marker is not None:
            self._confirm(str(marker["attempt"]), marker)  # trusted: aborted ones are hidden
        self.committed_earlier = found is not None
        assert self.dedup is not None
        registered = self.dedup.claim_as(
            self.partition, self.fingerprint, take=not self.committed_earlier
        )
        if registered != self.fingerprint:
            raise self._split(registered, "claimed records")
        if self.committed_earlier:
            self.result.skipped_shards.append(self.partition)
        return self.committed_earlier

    def _split(self, earlier: str, what: str) -> EpochSplitError:
        return EpochSplitError(
            f"{self.where}: an earlier attempt of this epoch {what} with other rows in this "
            f"Spark partition (input fingerprint {earlier}, now {self.fingerprint}): Spark "
            "split the re-run epoch differently (SPARK-28650). Writing it would append records "
            "twice or lose some, so the epoch is refused and the query stops. A restart that "
            "splits the epoch as before continues; use foreachBatch for a source whose "
            "re-runs split differently"
        )

    def _write_rows(self, rows: pa.RecordBatch) -> None:
        if not self.committed_earlier:
            super()._write_rows(rows)

    def _write_dead_letters(self, letters: Sequence[DeadLetter]) -> None:
        if not self.committed_earlier:
            super()._write_dead_letters(letters)

    def _commit_info(self) -> dict[str, Any]:
        return {**super()._commit_info(), "fingerprint": self.fingerprint}
