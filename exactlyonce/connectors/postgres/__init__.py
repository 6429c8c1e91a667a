"""The exactly-once PostgreSQL sink.

- :mod:`.config`: :class:`PostgresSinkConfig`, every setting's rule and default;
- :mod:`.sink`: :class:`PostgresSink` (driver side: preflight, the head row, the projection);
  its docstring states the guarantee and the mechanism;
- :mod:`.writer`: the executor task's one transaction per shard (COPY, ON CONFLICT fallback,
  bad records to the dead-letter table);
- :mod:`.upsert`: ``mode="upsert"``, a batch applied under the epoch guard, tombstones;
- :mod:`.schema`: table names, the control tables' DDL and catalog queries.

Crash tests: ``tests/crash/test_postgres_crash.py``.

Names are imported on first use (PEP 562): a Spark task that unpickles a task writer
imports this package on its way, and must not pay for the driver's side (the sink, its
pydantic config): about a second per cold Python worker, after every restart.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from exactlyonce.lazy import lazy_exports

if TYPE_CHECKING:
    from exactlyonce.connectors.postgres.config import MODES, Mode, PostgresSinkConfig
    from exactlyonce.connectors.postgres.sink import PostgresSink
    from exactlyonce.connectors.postgres.writer import PgTarget, PostgresShardWriter, to_csv

# Public name -> the module that defines it, imported when the name is first asked for.
_LAZY = {
    "MODES": "exactlyonce.connectors.postgres.config",
    "Mode": "exactlyonce.connectors.postgres.config",
    "PostgresSinkConfig": "exactlyonce.connectors.postgres.config",
    "PostgresSink": "exactlyonce.connectors.postgres.sink",
    "PgTarget": "exactlyonce.connectors.postgres.writer",
    "PostgresShardWriter": "exactlyonce.connectors.postgres.writer",
    "to_csv": "exactlyonce.connectors.postgres.writer",
}


__all__ = [
    "MODES",
    "Mode",
    "PgTarget",
    "PostgresShardWriter",
    "PostgresSink",
    "PostgresSinkConfig",
    "to_csv",
]

__getattr__, __dir__ = lazy_exports(globals(), _LAZY)
