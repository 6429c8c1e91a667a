"""The Kafka sink's task writer: the ``mapInArrow`` function Spark pickles to every task."""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa

from exactlyonce.connectors.base.report import TaskResult
from exactlyonce.connectors.base.task import ShardWriter
from exactlyonce.connectors.kafka.partition_task import KafkaPartitionTask
from exactlyonce.connectors.kafka.target import KafkaTarget
from exactlyonce.connectors.kafka.task import KafkaShardTask


class KafkaShardWriter(ShardWriter[KafkaTarget]):
    """The ``mapInArrow`` function of one epoch: a shard's transaction per task
    (:class:`~.task.KafkaShardTask`), or on the data source path a Spark partition's
    (:class:`~.partition_task.KafkaPartitionTask`)."""

    task_class = KafkaShardTask

    def write_unaligned(self, batches: Iterator[pa.RecordBatch], partition: int) -> TaskResult:
        """A Spark partition's task of the data source path: its own transactional id,
        markers and claims (:mod:`.partition_task`), never a shard's."""
        return KafkaPartitionTask(self.target, self.epoch, partition).run(batches)
