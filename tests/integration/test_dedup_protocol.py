"""The dedup protocol's state machine (:mod:`tests.support.protocol_machine`) against real
PostgreSQL and Redis.

The sink is a :class:`PostgresSink` in ``mode="append"`` (no unique index), so exactly-once
rests on the head, the shard commits and the catalog alone, and a double write would show up
as a duplicate row. ``tests/unit/test_protocol_memory.py`` runs the same machine on the
in-memory fakes of :mod:`exactlyonce.testing`, in a second and without services.
"""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from exactlyonce.connectors import PostgresSink
from exactlyonce.dedup.config import DedupConfig
from tests.support.protocol_machine import ProtocolMachine, run_machine

pytestmark = pytest.mark.integration


class PostgresProtocolMachine(ProtocolMachine):
    dsn: str
    redis_url: str

    def _dedup_config(self, **options: Any) -> DedupConfig:
        return DedupConfig(self.redis_url, **options)

    def _new_sink(self) -> PostgresSink:
        return PostgresSink(
            self.dsn,
            self.table,
            ["event_id"],
            self.table,
            mode="append",
            shards=3,
            dedup=self.config,
            check=False,
        )

    def _event_ids(self) -> list[str]:
        with psycopg.connect(self.dsn) as conn:
            return [r[0] for r in conn.execute(f'SELECT event_id FROM "{self.table}"').fetchall()]

    def _catalog_client(self) -> Any:
        import redis

        return redis.Redis.from_url(self.redis_url)


def test_protocol_state_machine(pg_dsn: str, services: dict[str, str]) -> None:
    PostgresProtocolMachine.dsn = pg_dsn
    PostgresProtocolMachine.redis_url = services["EXACTLYONCE_REDIS_URL"]
    run_machine(PostgresProtocolMachine, max_examples=25, steps=14)
