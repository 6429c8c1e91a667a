"""Pure logic of ``exactlyonce heads``/``rewind``: the checkpoint plan, the catalog's own keys,
the in-memory head store's rewind, and the plain output."""

from __future__ import annotations

import fnmatch
from pathlib import Path

import pytest

from exactlyonce.connectors.base import Head
from exactlyonce.dedup.keys import CatalogKeys, namespace
from exactlyonce.integration.checkpoint import local_path, plan_rewind, rewind_checkpoint
from exactlyonce.integration.cli.heads import describe
from exactlyonce.testing.store import MemoryHeadStore, MemoryStore


def make_checkpoint(root: Path, batches: int, committed: int) -> Path:
    for log, last in (("offsets", batches), ("commits", committed)):
        (root / log).mkdir(parents=True)
        for b in range(last):
            (root / log / str(b)).write_text("v1\n")
            (root / log / f".{b}.crc").write_bytes(b"crc")
    (root / "metadata").write_text('{"id":"q"}')
    (root / "sources" / "0").mkdir(parents=True)
    (root / "sources" / "0" / "0").write_text("v1\n")
    return root


def names(root: Path, log: str) -> list[str]:
    return sorted(p.name for p in (root / log).iterdir())


def test_checkpoint_rewind_deletes_only_the_batches_above_the_epoch(tmp_path: Path) -> None:
    root = make_checkpoint(tmp_path / "ckpt", batches=5, committed=4)
    plan = plan_rewind(str(root), 1)
    assert plan.refusal is None and plan.batches_above == [2, 3, 4]
    rewind_checkpoint(plan)
    assert names(root, "offsets") == [".0.crc", ".1.crc", "0", "1"]
    assert names(root, "commits") == [".0.crc", ".1.crc", "0", "1"]
    assert (root / "metadata").exists() and (root / "sources" / "0" / "0").exists()
    rewind_checkpoint(plan)  # idempotent
    assert plan_rewind(str(root), 1).batches_above == []


def test_checkpoint_rewind_to_minus_one_deletes_the_checkpoint(tmp_path: Path) -> None:
    root = make_checkpoint(tmp_path / "ckpt", batches=2, committed=2)
    plan = plan_rewind(f"file://{root}", -1)
    assert plan.refusal is None and "delete the checkpoint" in plan.describe().lower()
    rewind_checkpoint(plan)
    assert not root.exists()


@pytest.mark.parametrize("stateful", [True, False])
def test_checkpoint_rewind_refuses_what_spark_could_not_restart_from(
    tmp_path: Path, stateful: bool
) -> None:
    root = make_checkpoint(tmp_path / "ckpt", batches=3, committed=3)
    if stateful:
        (root / "state").mkdir()
        refusal = plan_rewind(str(root), 1).refusal
        assert refusal is not None and "state" in refusal
    else:
        (root / "offsets" / "0").unlink()  # purged by minBatchesToRetain
        refusal = plan_rewind(str(root), 0).refusal
        assert refusal is not None and "no longer holds batch 0" in refusal
    assert plan_rewind(str(root), -1).refusal is None


def test_a_remote_checkpoint_is_left_to_the_user(tmp_path: Path) -> None:
    assert local_path("s3a://bucket/ckpt") is None
    plan = plan_rewind("s3a://bucket/ckpt", 3)
    assert plan.describe().startswith("YOU MUST delete offsets/<b> and commits/<b>")
    rewind_checkpoint(plan)  # touches nothing


def test_catalog_patterns_never_match_the_redis_sinks_keys_under_the_same_prefix() -> None:
    keys = CatalogKeys(namespace("q", "redis:stream:s"))
    sink_keys = [f"{keys.prefix}:sink:{k}" for k in ("head", "done:3", "streams", "dead-letters")]
    mine = [keys.meta, keys.stats(0), keys.bucket(0, 1, 2), keys.journal(1, 4), keys.bloom(0, 1)]
    mine += [keys.bloom_version(0, 1), keys.tmp(3), keys.marker(2)]
    mine += [f"{keys.prefix}:{old}" for old in ("stats", "c:0:1:2", "j:1:4", "b:0:1", "bv:0:1")]

    def matched(key: str) -> bool:
        return any(fnmatch.fnmatchcase(key, p) for p in keys.patterns) and keys.owns(key)

    assert all(matched(k) for k in mine)
    assert not any(matched(k) for k in sink_keys)
    assert all(fnmatch.fnmatchcase(k, keys.everything) for k in sink_keys)  # why not it


def test_memory_head_store_rewinds_back_only_and_clears_the_query_id() -> None:
    store = MemoryStore()
    heads = MemoryHeadStore(store, "q", "s")
    heads.create_head(Head(-1, "id-1", 2))
    heads.advance_head(5, "id-1")
    store.shard_commits[("q", "s")] = {6: {0: "w"}, 7: {1: "w"}}
    heads.rewind_head(3)
    assert heads.read_head() == Head(3, None, 2)
    assert store.shard_commits[("q", "s")] == {}
    heads.rewind_head(4)  # never forward
    assert heads.read_head() == Head(3, None, 2)
    heads.bind_query_id("id-2")
    assert heads.read_head() == Head(3, "id-2", 2)


def test_head_equality_ignores_when_it_was_written() -> None:
    assert Head(1, "q", 2, 100.0) == Head(1, "q", 2)


def test_plain_heads_output_reads_in_a_terminal() -> None:
    state = {
        "query_name": "q",
        "sink": "postgres:public.t",
        "kind": "postgres",
        "head": {
            "epoch": 3,
            "spark_query_id": None,
            "num_shards": 2,
            "advanced_at": "2025-01-01T00:00:00.000Z",
        },
        "shard_commits": {"4": [0, 1]},
        "catalog": {
            "exists": True,
            "shards": 2,
            "generations": [0, 1],
            "live_ids": 10,
            "bytes": 170,
            "bytes_per_id": 17.0,
            "per_generation": {},
        },
        "buffer": {
            "topic": "b",
            "drain_target": "postgres:public.t",
            "positions": {"0": 5},
            "lag": {"records": 3, "seconds": 1.5},
        },
    }
    text = "\n".join(describe(state))
    assert "epoch 3, Spark query none bound, 2 shards" in text
    assert "epoch 4: shards 0, 1" in text
    assert "10 live IDs in generations 0-1 over 2 shards, 170 bytes (17.0 per ID)" in text
    assert "drain offsets: [0] 5" in text and "3 records, 1.5s behind" in text
    state["head"] = None
    assert "head: no head yet" in "\n".join(describe(state))


def test_a_checkpoint_still_to_follow_the_head_is_pending(tmp_path: Path) -> None:
    root = make_checkpoint(tmp_path / "ckpt", batches=3, committed=3)
    assert plan_rewind(str(root), 0).pending and plan_rewind(str(root), -1).pending
    rewind_checkpoint(plan_rewind(str(root), 0))
    assert not plan_rewind(str(root), 0).pending
    rewind_checkpoint(plan_rewind(str(root), -1))
    assert not plan_rewind(str(root), -1).pending  # gone: a rewind to -1 is done
