"""The drainer: buffer topic -> the real sink, exactly once (see :mod:`.drainer`).

One module per part: :mod:`.drainer` (the lifecycle), :mod:`.control` (the control topic),
:mod:`.positions` (stored offsets), :mod:`.planner` and :mod:`.chunk` (what to read, and
reading it), :mod:`.writer` (parallel shares), :mod:`.dead_letters`, :mod:`.lag`,
:mod:`.clients` (Kafka consumers); the drain-target contract :mod:`.target` and the factory
:mod:`.targets`, and one target per sink: PostgreSQL :mod:`.postgres_target` (offsets and
transactions), with :mod:`.fast_path` (Arrow -> COPY) and :mod:`.exact_path` (INSERT).
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
from exactlyonce.buffer.drain.target import DrainTarget, Share
from exactlyonce.buffer.drain.targets import target_for

__all__ = [
    "DRAIN_PROCESS_SWITCH_INTERVAL_S",
    "OFFSETS",
    "DrainReport",
    "DrainRow",
    "DrainTarget",
    "Drainer",
    "InsertResult",
    "Lag",
    "PgDrainTarget",
    "Share",
    "arrow_type",
    "target_for",
]
