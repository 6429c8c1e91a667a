"""``audit_pipeline``: the audit of a pipeline file's sink, whichever it is, read by the
sink's own audit reader (its registry entry's ``audit``). A buffered sink is audited where
the drainer writes it (the buffer topic is not the sink); its dead letters are those of the
sink plus the buffer's own dead-letter topic, where Spark puts a record without a key before
any drain."""

from __future__ import annotations

from exactlyonce.buffer import Buffered
from exactlyonce.connectors import registry
from exactlyonce.connectors.base.audit import SinkAudit
from exactlyonce.connectors.base.expected import Expected
from exactlyonce.connectors.kafka.audit import count_dead_letters
from exactlyonce.integration.config import PipelineConfig
from exactlyonce.integration.config.sinks import build_sink


def audit_pipeline(
    cfg: PipelineConfig, expected: Expected, *, expected_dead_letters: int | None = None
) -> SinkAudit:
    """What the pipeline's sink holds against ``expected`` (record ID -> key values)."""
    sink = build_sink(cfg.sink, check=False)  # no preflight: nothing created
    audit = registry.kind_of(sink).audit_reader()(sink, expected)
    buffer = getattr(cfg.sink, "buffer", None)
    if buffer is not None:
        letters = count_dead_letters(Buffered(sink, buffer.build(), check=False))
        audit.dead_letters = (audit.dead_letters or 0) + letters
    audit.expected_dead_letters = expected_dead_letters
    return audit
