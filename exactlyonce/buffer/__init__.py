"""A Kafka buffer ahead of slow sinks, and its drainer.

``Buffered(sink, KafkaBuffer(...))`` (:mod:`.buffered`) is the ``foreachBatch`` callable: Spark
commits each batch to the buffer topic exactly once and returns. :class:`Drainer`
(:mod:`.drain`; ``exactlyonce drain pipeline.yaml``, or a thread) moves the records into the
sink (PostgreSQL, Redis or Elasticsearch), keeping its consumed offsets in the sink: in the
same atomic step as the records, or after records written idempotently by ID (see
:mod:`.drain.target`). Buffer messages carry records in frames (:mod:`.frames`).
"""

from exactlyonce.buffer.buffered import Buffered, KafkaBuffer
from exactlyonce.buffer.drain import Drainer, DrainReport, Lag

__all__ = ["Buffered", "DrainReport", "Drainer", "KafkaBuffer", "Lag"]
