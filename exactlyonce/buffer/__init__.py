"""A Kafka buffer ahead of slow sinks, and its drainer.

``Buffered(sink, KafkaBuffer(...))`` (:mod:`.buffered`) is the ``foreachBatch`` callable: Spark
commits each batch to the buffer topic exactly once and returns. :class:`Drainer`
(:mod:`.drain`; ``exactlyonce drain pipeline.yaml``, or a thread) moves the records into the
sink, keeping its consumed offsets in the sink, in the same transaction as the rows. Buffer
messages carry records in frames (:mod:`.frames`).
"""

from exactlyonce.buffer.buffered import Buffered, KafkaBuffer
from exactlyonce.buffer.drain import Drainer, DrainReport, Lag

__all__ = ["Buffered", "DrainReport", "Drainer", "KafkaBuffer", "Lag"]
