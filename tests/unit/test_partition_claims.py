"""Pure logic of the Kafka sink on Spark's data source path: the fingerprint of a partition's
input, the claim rule, and where claims live in the catalog's key layout."""

from __future__ import annotations

import re

import pyarrow as pa
import pytest

from exactlyonce.connectors.kafka.fingerprint import input_fingerprint
from exactlyonce.dedup.claims import claim_decisions
from exactlyonce.dedup.ids import record_id
from exactlyonce.dedup.keys import CatalogKeys, namespace


def batch(keys: list[str | None], payload: str = "{}") -> pa.RecordBatch:
    ids = [record_id([k]) if k is not None else None for k in keys]
    payloads = [None if k is not None else payload for k in keys]
    return pa.RecordBatch.from_arrays(
        [pa.array(ids, pa.string()), pa.array(payloads, pa.string())], names=["id", "payload"]
    )


def fingerprint(*batches: pa.RecordBatch) -> str:
    return input_fingerprint(batches, "id", "payload")


def test_fingerprint_ignores_order_and_batching() -> None:
    rows: list[str | None] = ["a", "b", "c", "a", None]
    whole = fingerprint(batch(rows))
    assert fingerprint(batch(rows[::-1])) == whole
    assert fingerprint(batch(rows[:2]), batch([]), batch(rows[2:])) == whole
    assert whole.startswith("5-")


@pytest.mark.parametrize(
    "other",
    [
        ["a", "b", "c", None],  # a repeat less
        ["a", "b", "c", "a", "a", None],  # a repeat more
        ["a", "b", "d", "a", None],  # another ID
        ["a", "b", "c", "a"],  # a bad record less
        ["b", "b", "c", "c", None],  # the same count, XOR-equal repeats moved
    ],
)
def test_fingerprint_sees_any_other_input(other: list[str | None]) -> None:
    assert fingerprint(batch(other)) != fingerprint(batch(["a", "b", "c", "a", None]))


def test_fingerprint_tells_bad_records_apart_by_payload() -> None:
    assert fingerprint(batch([None], '{"x":1}')) != fingerprint(batch([None], '{"x":2}'))
    assert fingerprint(batch([None, None])) != fingerprint(batch([None]))


def test_empty_input_has_a_fingerprint() -> None:
    assert fingerprint() == fingerprint(batch([])) == "0-" + "0" * 32 + "-" + "0" * 32


ME, OTHER = b"1", b"2"


@pytest.mark.parametrize(
    ("holder", "take", "writes"),
    [
        (None, True, True),  # unclaimed: claimed for this partition, written
        (ME, True, True),  # claimed by this partition (an aborted attempt): rewritten
        (OTHER, True, False),  # another partition of the epoch writes it
        (None, False, False),  # asking only (this partition committed before): not its
        (ME, False, True),  # asking only: its committed attempt wrote it (re-marked)
        (OTHER, False, False),
    ],
)
def test_claim_rule(holder: bytes | None, take: bool, writes: bool) -> None:
    assert claim_decisions([holder], ME, take) == [writes]


def test_claims_live_in_their_shards_slot_and_belong_to_the_catalog() -> None:
    keys = CatalogKeys(namespace("q", "kafka:t"))
    tag = re.compile(r"\{([^}]*)\}")
    for shard in (0, 5):
        claims = keys.claims(shard, 7)
        assert tag.search(claims)[1] == tag.search(keys.marker(shard))[1]  # type: ignore[index]
        assert keys.parse_claims(claims) == 7
        assert keys.owns(claims), "dropped with the catalog"
    registry = keys.partitions(7)
    assert tag.search(registry)[1] == tag.search(keys.marker(0))[1]  # type: ignore[index]
    assert keys.parse_claims(registry) == 7 and keys.owns(registry)
    assert keys.parse_claims(keys.journal(0, 7)) is None
    assert keys.parse_journal(keys.claims(0, 7)) is None
