"""The drainer: buffer topic -> the real sink, exactly once (see :mod:`.drainer`).

One module per part: :mod:`.drainer` (the lifecycle), :mod:`.control` (the control topic),
:mod:`.positions` (stored offsets), :mod:`.planner` and :mod:`.chunk` (what to read, and
reading it), :mod:`.writer` (parallel shares), :mod:`.dead_letters`, :mod:`.lag`,
:mod:`.clients` (Kafka consumers) and :mod:`.targets` (the sink's drain target, from the
registry). The drain-target contract is :mod:`exactlyonce.connectors.base.drain`; each sink's
target lives in its own package (``exactlyonce.connectors.<sink>.drain``).
"""

from exactlyonce.buffer.drain.drainer import (
    DRAIN_PROCESS_SWITCH_INTERVAL_S,
    Drainer,
    DrainReport,
)
from exactlyonce.buffer.drain.lag import Lag
from exactlyonce.buffer.drain.targets import target_for
from exactlyonce.connectors.base.drain import DrainTarget, Share

__all__ = [
    "DRAIN_PROCESS_SWITCH_INTERVAL_S",
    "DrainReport",
    "DrainTarget",
    "Drainer",
    "Lag",
    "Share",
    "target_for",
]
