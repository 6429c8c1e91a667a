"""The kill -9 demo (``make demo``): a pipeline SIGKILLed mid-stream still writes exactly once.

::

    python -m exactlyonce.integration.demo [--config examples/pipeline.yaml] [--files 24]
        [--rows-per-file 500] [--kills 3] [--seed N]

1. Fresh state (:mod:`.reset`): the pipeline's checkpoint and input directory are removed,
   its table dropped, its Redis dedup catalog deleted, and the query's head, shard-commit and
   dead-letter rows deleted.
2. All input is generated up front (:mod:`.inputs`; a replayable source, so the expected set
   is known): JSON-lines files with deterministic content from the seed; about a quarter of
   the records repeat an earlier event_id (in the same file or an earlier one), and a few
   have a null event_id, which must land in the dead-letter table.
3. ``exactlyonce run`` runs in its own process group (:mod:`.runs`, output echoed by
   :mod:`.echo`); once the sink's head shows 1-3 new epochs (seeded), after a random 0-2 s,
   the whole group is SIGKILLed and the run restarted, ``--kills`` times. The last run goes
   on until idle.
4. An audit read back from PostgreSQL (:mod:`.audit`): no duplicate, nothing missing, every
   bad record in the dead-letter table exactly once. Exit 0 only then.

:mod:`.pipeline` checks the pipeline file fits (PostgreSQL sink, JSON files source);
:mod:`.command` is the command line. The services must be up (``make services``); their
addresses come from ``service_env()``.
"""

from __future__ import annotations

from exactlyonce.integration.demo.audit import (
    Audit,
    print_audit,
    read_audit,
    read_expected_ids,
)
from exactlyonce.integration.demo.command import main
from exactlyonce.integration.demo.echo import DEDUP_FIELDS, DEDUP_TOTALS, print_dedup_totals
from exactlyonce.integration.demo.inputs import (
    ACTIONS,
    DUPLICATE_RATE,
    FIELDS,
    NULL_KEYS,
    Expected,
    Record,
    generate,
    write_files,
)
from exactlyonce.integration.demo.reset import reset_state
from exactlyonce.integration.demo.runs import (
    IDLE_SECONDS,
    RUN_TIMEOUT_SECONDS,
    head_epoch,
    kill_group,
    run_with_kills,
    start_run,
    wait_for_new_epoch,
)

__all__ = [
    "ACTIONS",
    "DEDUP_FIELDS",
    "DEDUP_TOTALS",
    "DUPLICATE_RATE",
    "FIELDS",
    "IDLE_SECONDS",
    "NULL_KEYS",
    "RUN_TIMEOUT_SECONDS",
    "Audit",
    "Expected",
    "Record",
    "generate",
    "head_epoch",
    "kill_group",
    "main",
    "print_audit",
    "print_dedup_totals",
    "read_audit",
    "read_expected_ids",
    "reset_state",
    "run_with_kills",
    "start_run",
    "wait_for_new_epoch",
    "write_files",
]
