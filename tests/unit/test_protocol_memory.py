"""The dedup protocol's state machine (:mod:`tests.support.protocol_machine`) on in-memory fakes.

The same rules, crash points and invariant as ``tests/integration/test_dedup_protocol.py``,
with a :class:`~exactlyonce.testing.MemorySink` in append mode for PostgreSQL and a
:class:`~exactlyonce.testing.MemoryRedis` for the catalog's Redis: the real protocol, task
and catalog code, no services, a few seconds.
"""

from __future__ import annotations

from typing import Any

from exactlyonce.dedup.config import DedupConfig
from exactlyonce.testing import MemoryRedis, MemorySink, MemoryStore
from tests.support.protocol_machine import ProtocolMachine, run_machine


class MemoryProtocolMachine(ProtocolMachine):
    def __init__(self) -> None:
        self.store = MemoryStore()
        self.redis = MemoryRedis()
        super().__init__()

    def _dedup_config(self, **options: Any) -> DedupConfig:
        return self.redis.dedup_config(**options)

    def _new_sink(self) -> MemorySink:
        return MemorySink(
            self.store,
            self.table,
            ["event_id"],
            self.table,
            mode="append",
            shards=3,
            dedup=self.config,
        )

    def _event_ids(self) -> list[str]:
        return [r["event_id"] for r in self.store.rows(self.table)]

    def _catalog_client(self) -> Any:
        return self.redis.connect()


def test_protocol_state_machine_in_memory() -> None:
    run_machine(MemoryProtocolMachine, max_examples=40, steps=16)
