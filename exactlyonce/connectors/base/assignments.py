"""Which source partition each Spark partition of a running Real-time Mode query read last:
a hint, shared by the Python workers of one machine, that lets the next epoch's task open its
store and read its frontier in :meth:`~.realtime.RealtimeWriter.open`, before its first row
arrives (Spark calls ``open`` 10-90 ms before then, measured by bench realtime).

Spark gives an epoch's task to whichever Python worker is idle, so a source partition often
moves to a worker that never wrote it; there the frontier read is a new Kafka producer's
start, a barrier and a scan (30-50 ms), which otherwise begins at the first row.

A hint is never trusted for correctness: the frontier read at ``open`` is the same fenced
read the first row would make, used only when the rows come from the hinted partition with
the hinted columns. A wrong hint costs time, never a record: for Kafka it fences the hinted
partition's writer, whose next commit fails (a producer kept from the previous epoch then
starts a new one and goes on; any other fails its task, which Spark runs again).

One small file per (query name, Spark partition) under the machine's temporary directory,
holding the Spark query id: a hint of an earlier run of the query is ignored. Any failure
to read or write one is ignored too.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

from exactlyonce.connectors.base.frontier import SourceKey

DIRECTORY = Path(tempfile.gettempdir()) / "exactlyonce-realtime"


@dataclass(frozen=True)
class Assignment:
    """A Spark partition's source partition, and the stream's columns, in one query run."""

    key: SourceKey
    columns: tuple[str, ...]


def _path(query_name: str, partition_id: int) -> Path:
    name = hashlib.sha1(query_name.encode("utf-8")).hexdigest()[:16]
    return DIRECTORY / f"{name}-{partition_id}.json"


def recall(query_id: str, query_name: str, partition_id: int) -> Assignment | None:
    """The assignment remembered for this run's Spark partition; None when there is none
    (or it cannot be read, or it belongs to another run of the query)."""
    try:
        found = json.loads(_path(query_name, partition_id).read_text("utf-8"))
        if found["query_id"] != query_id:
            return None
        return Assignment((str(found["topic"]), int(found["partition"])), tuple(found["columns"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def remember(query_id: str, query_name: str, partition_id: int, assignment: Assignment) -> None:
    """Keep ``assignment`` for the next task of this Spark partition (any worker)."""
    topic, partition = assignment.key
    text = json.dumps(
        {
            "query_id": query_id,
            "topic": topic,
            "partition": partition,
            "columns": list(assignment.columns),
        }
    )
    path = _path(query_name, partition_id)
    with contextlib.suppress(OSError):
        DIRECTORY.mkdir(parents=True, exist_ok=True)
        temporary = path.with_suffix(f".{os.getpid()}.tmp")
        temporary.write_text(text, "utf-8")
        os.replace(temporary, path)
