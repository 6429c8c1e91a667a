"""``audit_pipeline``: the audit of a pipeline file's sink, whichever it is, read by the
module of that sink (:mod:`.postgres`, :mod:`.kafka`, :mod:`.elasticsearch`, :mod:`.redis`).
A buffered sink is audited where the drainer writes it (the buffer topic is not the sink);
its dead letters are those of the sink plus the buffer's own dead-letter topic, where Spark
puts a record without a key before any drain."""

from __future__ import annotations

from exactlyonce.connectors.elasticsearch import ElasticsearchSink
from exactlyonce.connectors.kafka import KafkaSink
from exactlyonce.connectors.postgres import PostgresSink
from exactlyonce.connectors.redis import RedisSink
from exactlyonce.integration.audit.elasticsearch import read_elasticsearch
from exactlyonce.integration.audit.expected import Expected
from exactlyonce.integration.audit.kafka import count_dead_letters, read_kafka
from exactlyonce.integration.audit.postgres import read_postgres
from exactlyonce.integration.audit.redis import read_redis
from exactlyonce.integration.audit.report import SinkAudit
from exactlyonce.integration.config import PipelineConfig
from exactlyonce.integration.config.sinks import build_sink


def audit_pipeline(
    cfg: PipelineConfig, expected: Expected, *, expected_dead_letters: int | None = None
) -> SinkAudit:
    """What the pipeline's sink holds against ``expected`` (record ID -> key values)."""
    sink = build_sink(cfg.sink, check=False)  # no preflight: nothing created
    if isinstance(sink, PostgresSink):
        audit = read_postgres(sink, expected)
    elif isinstance(sink, KafkaSink):
        audit = read_kafka(sink, expected)
    elif isinstance(sink, ElasticsearchSink):
        audit = read_elasticsearch(sink, expected)
    elif isinstance(sink, RedisSink):
        audit = read_redis(sink, expected)
    else:  # pragma: no cover - build_sink builds one of the four
        raise TypeError(f"no audit for {type(sink).__name__}")
    buffer = getattr(cfg.sink, "buffer", None)
    if buffer is not None:
        letters = count_dead_letters(buffer.build().wrap(sink, check=False))
        audit.dead_letters = (audit.dead_letters or 0) + letters
    audit.expected_dead_letters = expected_dead_letters
    return audit
