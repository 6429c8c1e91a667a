"""The sink contract every connector implements.

- :mod:`.sink`: :class:`ExactlyOnceSink`, the ``foreachBatch`` callable and its epoch runner
  (``run_epoch``), in the driver;
- :mod:`.head`: :class:`Head` and the :class:`HeadStore` protocol each sink implements, with
  each method's obligations;
- :mod:`.task`: :class:`ShardTask`, the executor task's atomic write of its shard, a small
  state machine, and :class:`ShardWriter`, the function Spark pickles to the tasks;
- :mod:`.report`: what tasks report and what a batch did;
- :mod:`.observers`: the report listeners every sink hands each batch's report to (metrics);
- :mod:`.logs`: the one line per batch, shown on stderr when no logging is configured;
- :mod:`.config`: :class:`SinkConfig`, the settings every sink's config model extends;
- :mod:`.upsert`: the rules every sink's ``mode="upsert"`` shares (config, the columns Spark
  adds, the within-epoch rule);
- :mod:`.rewind`: :class:`Removal`, what ``exactlyonce rewind`` removes above an epoch;
- :mod:`.projection`, :mod:`.columns`: the ID columns and the protocol's column names.

Names are imported on first use (PEP 562): a Spark task that unpickles a task writer
imports this package on its way, and must not pay for the driver's side (the sink, its
pydantic config): about a second per cold Python worker, after every restart.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from exactlyonce.lazy import lazy_exports

if TYPE_CHECKING:
    from exactlyonce.connectors.base.columns import ERROR_COLUMN, PAYLOAD_COLUMN, SHARD_COLUMN
    from exactlyonce.connectors.base.head import NO_EPOCH, Head, HeadStore
    from exactlyonce.connectors.base.logs import quiet
    from exactlyonce.connectors.base.observers import (
        ReportListener,
        add_report_listener,
        remove_report_listener,
    )
    from exactlyonce.connectors.base.report import (
        DEDUP_COUNTERS,
        TASK_COUNTERS,
        TASK_RESULT_SCHEMA,
        BatchReport,
        TaskResult,
        batch_line,
        bloom_over_capacity,
    )
    from exactlyonce.connectors.base.rewind import Removal
    from exactlyonce.connectors.base.sink import ExactlyOnceSink, TaskWriter, spark_query_id
    from exactlyonce.connectors.base.task import DeadLetter, ShardTask, ShardWriter, writer_name

# Public name -> the module that defines it, imported when the name is first asked for.
_LAZY = {
    "ERROR_COLUMN": "exactlyonce.connectors.base.columns",
    "PAYLOAD_COLUMN": "exactlyonce.connectors.base.columns",
    "SHARD_COLUMN": "exactlyonce.connectors.base.columns",
    "Head": "exactlyonce.connectors.base.head",
    "HeadStore": "exactlyonce.connectors.base.head",
    "NO_EPOCH": "exactlyonce.connectors.base.head",
    "quiet": "exactlyonce.connectors.base.logs",
    "ReportListener": "exactlyonce.connectors.base.observers",
    "add_report_listener": "exactlyonce.connectors.base.observers",
    "remove_report_listener": "exactlyonce.connectors.base.observers",
    "BatchReport": "exactlyonce.connectors.base.report",
    "DEDUP_COUNTERS": "exactlyonce.connectors.base.report",
    "TASK_COUNTERS": "exactlyonce.connectors.base.report",
    "TASK_RESULT_SCHEMA": "exactlyonce.connectors.base.report",
    "TaskResult": "exactlyonce.connectors.base.report",
    "batch_line": "exactlyonce.connectors.base.report",
    "bloom_over_capacity": "exactlyonce.connectors.base.report",
    "Removal": "exactlyonce.connectors.base.rewind",
    "ExactlyOnceSink": "exactlyonce.connectors.base.sink",
    "TaskWriter": "exactlyonce.connectors.base.sink",
    "spark_query_id": "exactlyonce.connectors.base.sink",
    "DeadLetter": "exactlyonce.connectors.base.task",
    "ShardTask": "exactlyonce.connectors.base.task",
    "ShardWriter": "exactlyonce.connectors.base.task",
    "writer_name": "exactlyonce.connectors.base.task",
}


__all__ = [
    "DEDUP_COUNTERS",
    "ERROR_COLUMN",
    "NO_EPOCH",
    "PAYLOAD_COLUMN",
    "SHARD_COLUMN",
    "TASK_COUNTERS",
    "TASK_RESULT_SCHEMA",
    "BatchReport",
    "DeadLetter",
    "ExactlyOnceSink",
    "Head",
    "HeadStore",
    "Removal",
    "ReportListener",
    "ShardTask",
    "ShardWriter",
    "TaskResult",
    "TaskWriter",
    "add_report_listener",
    "batch_line",
    "bloom_over_capacity",
    "quiet",
    "remove_report_listener",
    "spark_query_id",
    "writer_name",
]

__getattr__, __dir__ = lazy_exports(globals(), _LAZY)
