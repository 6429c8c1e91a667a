"""``exactlyonce audit``: what a pipeline's sink holds, read back from the destination
itself, against the IDs it should hold, for every sink.

Each sink is read by a module of its own, next to its knowledge of the layout
(:mod:`.postgres`: rows of the table; :mod:`.kafka`: records of the topic, as a plain
``read_committed`` consumer where the broker hides aborted records; :mod:`.elasticsearch`:
documents and their ``_version``; :mod:`.redis`: stream entries, or the keys of hash and
string writes). Every reading ends in one :class:`SinkAudit` (:mod:`.report`): counts per
record ID, duplicates, missing and unexpected IDs (named), dead letters and the head, printed
as a table ending in ``RESULT:`` or as one JSON document. The expected IDs come from a file
(:mod:`.expected`). Read-only (the Kafka audit runs the sink's preflight, which creates the
sink's own control, dead-letter and probe topics when missing)."""

from __future__ import annotations

from exactlyonce.integration.audit.expected import Expected, read_expected, spark_text
from exactlyonce.integration.audit.pipeline import audit_pipeline
from exactlyonce.integration.audit.report import SinkAudit, audit_json, print_sink_audit

__all__ = [
    "Expected",
    "SinkAudit",
    "audit_json",
    "audit_pipeline",
    "print_sink_audit",
    "read_expected",
    "spark_text",
]
