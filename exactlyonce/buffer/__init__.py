"""A Kafka buffer ahead of slow sinks, and its drainer.

``Buffered(sink, KafkaBuffer(...))`` is the ``foreachBatch`` callable: Spark commits each batch
to the buffer topic exactly once and returns. :class:`Drainer` (``exactlyonce drain
pipeline.yaml``, or a thread) moves the records into the sink, keeping its consumed offsets in
the sink, in the same transaction as the rows.
"""

from exactlyonce.buffer.drainer import Drainer, DrainReport, Lag
from exactlyonce.buffer.kafka_buffer import Buffered, KafkaBuffer

__all__ = ["Buffered", "DrainReport", "Drainer", "KafkaBuffer", "Lag"]
