"""The catalog's key layout 2: one slot per (query, shard), patterns that find only its keys."""

from __future__ import annotations

import fnmatch

from redis.crc import key_slot

from exactlyonce.dedup.keys import CatalogKeys, namespace


def shard_keys(keys: CatalogKeys, shard: int) -> list[str]:
    return [
        keys.marker(shard),
        keys.stats(shard),
        keys.bucket(shard, 3, 0xAB),
        keys.journal(shard, 17),
        keys.journal_index(shard),
        keys.bloom(shard, 3),
        keys.bloom_version(shard, 3),
        keys.tmp(shard),
    ]


def test_a_shards_keys_share_one_slot_and_shards_use_different_slots() -> None:
    keys = CatalogKeys(namespace("orders", "postgres:public.orders"))
    slots = []
    for shard in range(16):
        mine = {key_slot(k.encode()) for k in shard_keys(keys, shard)}
        assert len(mine) == 1, f"shard {shard}: {mine}"
        slots.append(mine.pop())
    assert len(set(slots)) == 16, "each shard has its own hash tag"


def test_patterns_find_both_layouts_and_owns_keeps_only_this_catalogs() -> None:
    keys = CatalogKeys(namespace("q", "s"))
    ours = [k for s in (0, 7, 12) for k in shard_keys(keys, s)] + [keys.meta]
    ours += [f"{keys.prefix}:{old}" for old in ("stats", "c:0:1:2", "j:1:4", "b:0:1", "bv:0:1")]
    other = CatalogKeys(namespace("q:" + keys.prefix[-11:-1], "s"))  # a name extending ours
    theirs = [k for s in (0, 3) for k in shard_keys(other, s)] + [f"{keys.prefix}:sink:head"]
    theirs += [f"{keys.prefix[:-1]}:x}}:c:1:2", f"{keys.prefix[:-1]}:1}}:nope"]

    def found(key: str) -> bool:
        return any(fnmatch.fnmatchcase(key, p) for p in keys.patterns) and keys.owns(key)

    assert all(found(k) for k in ours)
    assert not any(found(k) for k in theirs)


def test_journals_are_parsed_only_for_this_catalog() -> None:
    keys = CatalogKeys(namespace("q", "s"))
    assert keys.parse_journal(keys.journal(5, 42)) == (5, 42)
    assert fnmatch.fnmatchcase(keys.journal(5, 42), keys.journals)
    assert keys.parse_journal(keys.bucket(5, 1, 2)) is None
    other = CatalogKeys(namespace("q2", "s"))
    assert keys.parse_journal(other.journal(5, 42)) is None
