"""The drainer: buffer topic -> PostgreSQL, exactly once (see :mod:`.drainer`).

One module per part: :mod:`.drainer` (the lifecycle), :mod:`.control` (the control topic),
:mod:`.positions` (stored offsets), :mod:`.planner` and :mod:`.chunk` (what to read, and
reading it), :mod:`.writer` (parallel shares), :mod:`.dead_letters`, :mod:`.lag`,
:mod:`.clients` (Kafka consumers), and the PostgreSQL target: :mod:`.postgres_target`
(offsets and transactions), :mod:`.fast_path` (Arrow -> COPY), :mod:`.exact_path` (INSERT).
"""

from exactlyonce.buffer.drain.drainer import (
    DRAIN_PROCESS_SWITCH_INTERVAL_S,
    Drainer,
    DrainReport,
)
from exactlyonce.buffer.drain.exact_path import DrainRow, InsertResult
from exactlyonce.buffer.drain.fast_path import arrow_type
from exactlyonce.buffer.drain.lag import Lag
from exactlyonce.buffer.drain.postgres_target import OFFSETS, PgDrainTarget

__all__ = [
    "DRAIN_PROCESS_SWITCH_INTERVAL_S",
    "OFFSETS",
    "DrainReport",
    "DrainRow",
    "Drainer",
    "InsertResult",
    "Lag",
    "PgDrainTarget",
    "arrow_type",
]
