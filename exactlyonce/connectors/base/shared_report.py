"""A batch's report, where a Spark Connect client can read it.

Under Spark Connect a sink's ``foreachBatch`` runs on the server, in a Python process the
client never sees, so ``sink.reports``, the per-batch log line and the metrics stay there. The
function runs with a session attached to the client's own (the same session id), so after
each batch the sink also puts its report, as JSON, in that session's runtime configuration
under :func:`report_key`; the client reads it back with
:func:`~exactlyonce.integration.spark.last_report` (``exactlyonce run --remote`` prints each
batch's line from it). In a classic session nothing is shared: the report is in the sink.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from typing import Any

from exactlyonce.connectors.base.report import BatchReport

REPORT_KEY_PREFIX = "spark.exactlyonce.report."

log = logging.getLogger(__name__)


def report_key(query_name: str, sink_name: str) -> str:
    """The runtime-conf key of the last report of (``query_name``, ``sink_name``)."""
    return f"{REPORT_KEY_PREFIX}{query_name}.{sink_name}"


def is_connect_session(session: Any) -> bool:
    """Whether ``session`` is a Spark Connect client session (no SparkContext)."""
    return type(session).__module__.startswith("pyspark.sql.connect")


def report_json(report: BatchReport) -> str:
    return json.dumps(dataclasses.asdict(report), separators=(",", ":"))


def report_from_json(text: str) -> BatchReport:
    """The report :func:`report_json` wrote; fields this version does not know are dropped."""
    known = {f.name for f in dataclasses.fields(BatchReport)}
    return BatchReport(**{k: v for k, v in json.loads(text).items() if k in known})


def share_report(session: Any, report: BatchReport) -> None:
    """Under Spark Connect, put ``report`` in ``session``'s runtime configuration. The report
    is information, not part of the protocol: a failure is logged, never raised (the batch
    has committed)."""
    if not is_connect_session(session):
        return
    try:
        session.conf.set(report_key(report.query_name, report.sink), report_json(report))
    except Exception as exc:
        log.warning(
            "could not share epoch %d's report with the Spark Connect client: %s: %s",
            report.epoch,
            type(exc).__name__,
            exc,
        )
