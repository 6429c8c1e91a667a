"""The exactly-once PostgreSQL sink.

- :mod:`.config`: :class:`PostgresSinkConfig`, every setting's rule and default;
- :mod:`.sink`: :class:`PostgresSink` (driver side: preflight, the head row, the projection);
  its docstring states the guarantee and the mechanism;
- :mod:`.writer`: the executor task's one transaction per shard (COPY, ON CONFLICT fallback,
  bad records to the dead-letter table);
- :mod:`.upsert`: ``mode="upsert"``, a batch applied under the epoch guard, tombstones;
- :mod:`.schema`: table names, the control tables' DDL and catalog queries.

Crash tests: ``tests/crash/test_postgres_crash.py``.
"""

from __future__ import annotations

from exactlyonce.connectors.postgres.config import MODES, Mode, PostgresSinkConfig
from exactlyonce.connectors.postgres.sink import PostgresSink
from exactlyonce.connectors.postgres.writer import PgTarget, PostgresShardWriter, to_csv

__all__ = [
    "MODES",
    "Mode",
    "PgTarget",
    "PostgresShardWriter",
    "PostgresSink",
    "PostgresSinkConfig",
    "to_csv",
]
