"""A Kafka buffer ahead of slow sinks, and its drainer.

``Buffered(sink, KafkaBuffer(...))`` (:mod:`exactlyonce.connectors.kafka.buffer`, the Kafka
sink's buffer mode) is the ``foreachBatch`` callable: Spark commits each batch to the buffer
topic exactly once and returns. :class:`Drainer` (:mod:`.drain`; ``exactlyonce drain
pipeline.yaml``, or a thread) moves the records into the sink through the sink's drain target
(its registry entry's ``drain``), keeping its consumed offsets in the sink: in the same atomic
step as the records, or after records written idempotently by ID (see
:mod:`exactlyonce.connectors.base.drain`). Buffer messages carry records in frames
(:mod:`exactlyonce.connectors.base.frames`).
"""

from exactlyonce.buffer.drain import Drainer, DrainReport, Lag
from exactlyonce.connectors.kafka.buffer import Buffered
from exactlyonce.connectors.kafka.buffer_config import KafkaBuffer

__all__ = ["Buffered", "DrainReport", "Drainer", "KafkaBuffer", "Lag"]
