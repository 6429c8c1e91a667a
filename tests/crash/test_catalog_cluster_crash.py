"""A PostgreSQL job whose catalog lives on a 3-master Redis Cluster, killed and bounced.

Append mode (no unique index): exactly-once rests on the head and the catalog, so a catalog
that lost or doubled anything shows as a duplicate or a gap, counted by write (audit
trigger). The job is SIGKILLed at two named points, then held after an epoch's head while
one master (the one holding shard 0) is SIGKILLed and restarted: on its AOF (the catalog
goes on; no rebuild), or empty (its shards are lost: the driver sees the missing markers and
rebuilds the catalog from the table).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import psycopg
import pytest

from exactlyonce.dedup.catalog import RedisCatalog
from exactlyonce.dedup.config import DedupConfig
from tests.crash.test_postgres_crash import prepare, verify
from tests.support.redis_cluster import RedisClusterNodes

pytestmark = [pytest.mark.crash, pytest.mark.integration]

SHARDS = 4


def catalog_masters(cluster: RedisClusterNodes, query: str) -> set[int]:
    """The masters serving the job's shard markers (each asserted to exist)."""
    catalog = RedisCatalog(DedupConfig(cluster.url), query, f"postgres:public.{query}")
    try:
        assert all(catalog.markers(SHARDS)), "the job keeps its catalog in the cluster"
    finally:
        catalog.close()
    return {cluster.port_of(catalog.keys.marker(s)) for s in range(SHARDS)}


@pytest.mark.parametrize("empty", [False, True], ids=["on-aof", "empty"])
def test_kills_and_a_master_restart_end_exactly_once(
    empty: bool,
    tmp_path: Path,
    pg_dsn: str,
    pg: psycopg.Connection[Any],
    unique_name: str,
    redis_cluster: RedisClusterNodes,  # noqa: F811
) -> None:
    job, data = prepare(tmp_path, pg_dsn, pg, unique_name, files=6, mode="append")
    job.env["EXACTLYONCE_REDIS_URL"] = redis_cluster.url
    job.extra_args = ("--shards", str(SHARDS))
    if not empty:
        job.kill_at_points([("mid_copy", 1), ("after_shard_commit", 2)])
    job.start(hold_at="after_head@3")
    job.wait_until_held("after_head")
    masters = catalog_masters(redis_cluster, unique_name)
    victim = min(masters)
    redis_cluster.restart(victim, down_seconds=1.0, empty=empty)
    print(f"restarted master {victim} ({'empty' if empty else 'on its AOF'}) of {masters}")
    job.release("after_head")
    job.finish()
    verify(job, data, pg)
    if not empty:
        assert len(job.kills) == 2, job.kills
    log = (job.workdir / f"run-{job.runs}.log").read_text()
    rebuilt = "catalog rebuilt from the sink" in log
    assert rebuilt == empty, "a rebuild exactly when the master came back empty"
