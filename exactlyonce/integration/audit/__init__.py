"""``exactlyonce audit``: what a pipeline's sink holds, read back from the destination
itself, against the IDs it should hold, for every sink.

Each sink is read by its own audit reader, in its own package and named by its registry
entry (PostgreSQL: rows of the table; Kafka: records of the topic, as a plain
``read_committed`` consumer where the broker hides aborted records; Elasticsearch: documents
and their ``_version``; Redis: stream entries, or the keys of hash and string writes). Every
reading ends in one :class:`~exactlyonce.connectors.base.audit.SinkAudit`: counts per record
ID, duplicates, missing and unexpected IDs (named), dead letters and the head, printed as a
table ending in ``RESULT:`` or as one JSON document. The expected IDs come from a file
(:mod:`exactlyonce.connectors.base.expected`). Read-only (the Kafka audit runs the sink's
preflight, which creates the sink's own control, dead-letter and probe topics when
missing)."""

from __future__ import annotations

from exactlyonce.connectors.base.audit import SinkAudit, audit_json, print_sink_audit
from exactlyonce.connectors.base.expected import Expected, read_expected, spark_text
from exactlyonce.integration.audit.pipeline import audit_pipeline

__all__ = [
    "Expected",
    "SinkAudit",
    "audit_json",
    "audit_pipeline",
    "print_sink_audit",
    "read_expected",
    "spark_text",
]
