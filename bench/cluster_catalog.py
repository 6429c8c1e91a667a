"""The catalog on one Redis vs a 3-master Redis Cluster: lookups and marks, bytes per ID.

``python -m bench cluster_catalog --ids 1000000 --big-ids 10000000`` measures, in one run,
against two private servers it starts (no persistence, so neither pays for fsync):

- marks and lookups per second, ``--clients`` processes at once (executor tasks, each
  owning ``--shards / --clients`` shards, in batches of ``--batch`` IDs), on one
  ``redis-server`` and on a 3-master cluster (the same code, the cluster client chosen by
  autodetection); lookups half hits, half misses;
- Redis bytes per live ID with ``--big-ids`` IDs in the catalog (buckets and Bloom filters,
  spread over 4 generations as a steady stream would), from the catalog's own counters
  (``MEMORY USAGE`` of its keys) and from ``used_memory`` before and after, per server.

On a machine with fewer cores than 3 masters plus the clients, the cluster cannot show its
scale-out: its rates say what the cluster's routing costs, not what more cores would give.
Writes ``bench/results/cluster.json``.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from bench.common import (
    add_results_dir_argument,
    machine_info,
    now_utc,
    progress,
    ratio,
    write_results,
)
from exactlyonce.dedup.catalog import DedupConfig, Layout, RedisCatalog
from tests.support.redis_cluster import RedisClusterNodes, free_cluster_ports
from tests.support.redis_fixtures import SinkRedis, free_port

QUERY = "bench-cluster-catalog"


def random_ids(n: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, size=(n, 16), dtype=np.uint8)


@contextmanager
def servers() -> Iterator[dict[str, str]]:
    """A standalone redis-server and a 3-master cluster, both without persistence."""
    base = Path(tempfile.mkdtemp(prefix="eo-bench-cluster-"))
    single = SinkRedis(base / "single", free_port(), persistent=False)
    cluster = RedisClusterNodes(base / "cluster", free_cluster_ports(3), persistent=False)
    try:
        single.start()
        cluster.start()
        yield {"single": single.url, "cluster": cluster.url}
    finally:
        single.kill()
        cluster.stop()
        shutil.rmtree(base, ignore_errors=True)


def _worker(args: tuple[str, int, list[int], int, int, Any]) -> dict[str, float]:
    """One client process: marks then lookups of its shards' IDs, timed after a barrier."""
    url, expected, shards, per_shard, batch, barrier = args
    config = DedupConfig(url, expected_ids=expected, retention_epochs=1000)
    catalog = RedisCatalog(config, QUERY, "bench")
    layout = Layout.from_meta(catalog.meta())
    instance = catalog.meta()["instance"]
    ids = {s: random_ids(per_shard, s) for s in shards}
    fresh = {s: random_ids(per_shard // 2, 10_000 + s) for s in shards}
    barrier.wait()
    began = time.perf_counter()
    for s in shards:
        for i in range(0, per_shard, batch):
            catalog.mark(instance, layout, s, 1, ids[s][i : i + batch], journal=False)
    marked = time.perf_counter()
    barrier.wait()
    looked = time.perf_counter()
    for s in shards:
        probe = np.concatenate((ids[s][: per_shard // 2], fresh[s]))
        for i in range(0, len(probe), batch):
            part = probe[i : i + batch]
            hits = catalog.lookup(instance, layout, s, 1, part)
            assert hits.sum() == min(len(part), max(0, per_shard // 2 - i)), "exact lookups"
    done = time.perf_counter()
    catalog.close()
    return {"mark_s": marked - began, "lookup_s": done - looked}


def rates(url: str, ids: int, shards: int, clients: int, batch: int) -> dict[str, Any]:
    """Marks and lookups per second, ``clients`` processes at once, on the server at ``url``."""
    config = DedupConfig(url, expected_ids=ids, retention_epochs=1000)
    catalog = RedisCatalog(config, QUERY, "bench")
    catalog.create(Layout.plan(config, shards))
    per_shard = ids // shards
    ctx = multiprocessing.get_context("fork")
    barrier = ctx.Manager().Barrier(clients)
    jobs = [
        (url, ids, list(range(c, shards, clients)), per_shard, batch, barrier)
        for c in range(clients)
    ]
    with ctx.Pool(clients) as pool:
        times = pool.map(_worker, jobs)
    total = per_shard * shards
    mark_s = max(t["mark_s"] for t in times)
    lookup_s = max(t["lookup_s"] for t in times)
    catalog.drop()
    catalog.close()
    return {
        "ids": total,
        "marks_per_s": round(total / mark_s),
        "lookups_per_s": round(total / lookup_s),
    }


def used_memory(catalog: RedisCatalog) -> int:
    """``used_memory`` summed over the server (or every master of the cluster)."""
    from redis.cluster import RedisCluster

    if not isinstance(catalog.redis, RedisCluster):
        return int(catalog.redis.info("memory")["used_memory"])
    info = catalog.redis.info("memory", target_nodes=RedisCluster.PRIMARIES)
    return sum(int(node["used_memory"]) for node in info.values())


def bytes_per_id(url: str, ids: int, shards: int) -> dict[str, Any]:
    """``ids`` IDs marked (and their filters merged) over 4 generations; bytes per ID."""
    config = DedupConfig(url, expected_ids=ids, retention_epochs=1000)
    catalog = RedisCatalog(config, f"{QUERY}-big", "bench")
    layout = Layout.plan(config, shards)
    before = used_memory(catalog)
    instance = catalog.create(layout)
    began = time.perf_counter()
    chunk = 200_000
    for n, start in enumerate(range(0, ids, chunk)):
        part = random_ids(min(chunk, ids - start), 1_000_000 + n)
        shard, epoch = n % shards, (n // shards % 4) * layout.gen_epochs + 1
        delta = layout.bloom.empty()
        delta.add(part)
        catalog.merge_bloom(instance, shard, layout.gen(epoch), delta)
        catalog.mark(instance, layout, shard, epoch, part, journal=False)
    seconds = time.perf_counter() - began
    usage = catalog.usage(layout, 3 * layout.gen_epochs + 1)
    after = used_memory(catalog)
    catalog.drop()
    catalog.close()
    return {
        "ids": usage.ids,
        "seconds": round(seconds, 1),
        "catalog_bytes_per_id": round(usage.bytes_per_id or 0, 2),
        "used_memory_bytes_per_id": round((after - before) / ids, 2),
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.cluster_catalog", description=__doc__)
    parser.add_argument("--ids", type=int, default=1_000_000, help="IDs for the rates")
    parser.add_argument("--big-ids", type=int, default=10_000_000, help="IDs for bytes/ID")
    parser.add_argument("--shards", type=int, default=12)
    parser.add_argument("--clients", type=int, default=3)
    parser.add_argument("--batch", type=int, default=10_000)
    add_results_dir_argument(parser)
    args = parser.parse_args(argv)
    results: dict[str, Any] = {}
    with servers() as urls:
        for name, url in urls.items():
            results[name] = rates(url, args.ids, args.shards, args.clients, args.batch)
            progress(f"{name}: {results[name]}")
            results[name]["memory"] = bytes_per_id(url, args.big_ids, args.shards)
            progress(f"{name}: {results[name]['memory']}")
    single, cluster = results["single"], results["cluster"]
    data: dict[str, Any] = {
        "date": now_utc(),
        "machine": machine_info(),
        "load_average": os.getloadavg(),
        "settings": vars(args) | {"results_dir": str(args.results_dir)},
        "single_node": single,
        "cluster_3_masters": cluster,
        "cluster_vs_single_marks": ratio(cluster["marks_per_s"], single["marks_per_s"]),
        "cluster_vs_single_lookups": ratio(cluster["lookups_per_s"], single["lookups_per_s"]),
    }
    data["targets"] = {
        "at_most_64_bytes_per_id": all(
            0 < r["memory"][k] <= 64
            for r in (single, cluster)
            for k in ("catalog_bytes_per_id", "used_memory_bytes_per_id")
        )
    }
    path = write_results("cluster", data, args.results_dir)
    for key, value in data.items():
        if key != "machine":
            print(f"{key}: {value}")
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
