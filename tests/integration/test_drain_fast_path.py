"""The drainer's fast path against real PostgreSQL and the local Kafka-protocol broker.

- ``PgDrainTarget.csv`` + ``copy`` (Arrow reads the JSON values with the table's own column
  types, COPY writes them) must leave exactly the rows the exact path (``INSERT ...
  json_populate_recordset ... ON CONFLICT``) leaves, for every column type it accepts;
- it must refuse, and leave nothing behind, whatever the exact path has to decide (a record ID
  already present, a value of the wrong type, a column type without an Arrow equivalent);
- ``RangeReader`` reads consecutive offset ranges with one assignment: every record once, in
  order, also where transaction markers leave gaps and a range ends at the partition's end.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from confluent_kafka import Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]
from psycopg import sql

from exactlyonce.connectors.base.drain import DrainRow
from exactlyonce.connectors.kafka.reader import RangeReader, consumer
from exactlyonce.connectors.postgres import PostgresSink
from exactlyonce.connectors.postgres.drain import PgDrainTarget
from exactlyonce.connectors.postgres.drain_fast import arrow_type
from exactlyonce.dedup.ids import record_id

pytestmark = pytest.mark.integration

COLUMNS = (
    "note text, big bigint, small smallint, num integer, ratio double precision, "
    "approx real, flag boolean, at timestamptz, local_at timestamp, day date, "
    "price numeric(20,4), tag varchar(40)"
)
VALUES = [
    {
        "note": 'quotes " and \\ backslash, commas, a\nnew line',
        "big": 9_007_199_254_740_993,
        "small": -32768,
        "num": 0,
        "ratio": 0.1,
        "approx": 1.5,
        "flag": True,
        "at": "2026-11-25T01:53:45.123Z",
        "local_at": "2026-11-25T01:53:45.123456",
        "day": "2026-02-28",
        "price": 1234567890123456.1234,
        "tag": "ünïcödé ✓",
    },
    {
        "note": "",
        "big": -1,
        "small": 7,
        "num": 2147483647,
        "ratio": 1e300,
        "approx": -0.0,
        "flag": False,
        "at": "1970-01-01T00:00:00Z",
        "local_at": "2000-01-01T00:00:00",
        "day": "1999-12-31",
        "price": -0.0001,
        "tag": "NULL",
    },
    {k: None for k in ("note", "big", "small", "num", "ratio", "approx", "flag", "at")},
    {"note": "keys missing, extra keys ignored", "unknown": [1, {"x": 2}]},
]


def make_table(pg: psycopg.Connection[Any], name: str, columns: str = COLUMNS) -> None:
    pg.execute(
        sql.SQL(
            "CREATE TABLE {} (record_id text NOT NULL, epoch bigint NOT NULL, " + columns + ")"
        ).format(sql.Identifier(name))
    )
    pg.execute(sql.SQL("CREATE UNIQUE INDEX ON {} (record_id)").format(sql.Identifier(name)))


def target_for(pg_dsn: str, name: str) -> PgDrainTarget:
    sink = PostgresSink(pg_dsn, name, ["note"], name, dedup=False, check=False)
    target = PgDrainTarget(sink, name)
    target.ensure()
    return target


def rows_of(pg: psycopg.Connection[Any], name: str) -> list[tuple[Any, ...]]:
    return pg.execute(
        sql.SQL("SELECT * FROM {} ORDER BY record_id").format(sql.Identifier(name))
    ).fetchall()


def encoded(values: list[dict[str, Any]]) -> list[bytes]:
    return [json.dumps(v, ensure_ascii=False).encode() for v in values]


def test_fast_path_writes_exactly_what_the_exact_path_writes(
    pg_dsn: str, pg: psycopg.Connection[Any], unique_name: str
) -> None:
    fast_name, exact_name = f"{unique_name}_f", f"{unique_name}_e"
    make_table(pg, fast_name)
    make_table(pg, exact_name)
    values = encoded(VALUES)
    ids = [record_id([str(i)]).upper().encode() for i in range(len(values))]  # lowered on write

    fast = target_for(pg_dsn, fast_name)
    data = fast.csv(ids, [7] * len(values), values)
    assert data is not None, "every column type of this table has an exact Arrow type"
    fast.begin()
    assert fast.copy(data)
    fast.commit({})

    exact = target_for(pg_dsn, exact_name)
    exact.begin()
    rows = [DrainRow(0, rid.lower(), 7, v, None) for rid, v in zip(ids, values, strict=True)]
    result = exact.insert(rows)
    exact.commit({})
    assert (result.written, result.duplicates, result.refused) == (len(values), 0, [])

    assert rows_of(pg, fast_name) == rows_of(pg, exact_name)
    assert len(rows_of(pg, fast_name)) == len(values)
    fast.close()
    exact.close()


def test_fast_path_refuses_what_only_the_exact_path_can_decide(
    pg_dsn: str, pg: psycopg.Connection[Any], unique_name: str
) -> None:
    make_table(pg, unique_name)
    target = target_for(pg_dsn, unique_name)
    values = encoded([{"note": "a", "big": 1}, {"note": "b", "big": 2}])
    ids = [record_id(["a"]).encode(), record_id(["b"]).encode()]
    first = target.csv(ids[:1], [1], values[:1])
    assert first is not None
    target.begin()
    assert target.copy(first)
    target.commit({})

    # A record ID already in the table: COPY is refused whole, nothing of it stays.
    data = target.csv(ids, [2, 2], values)
    assert data is not None
    target.begin()
    assert not target.copy(data)
    result = target.insert([DrainRow(0, r, 2, v, None) for r, v in zip(ids, values, strict=True)])
    target.commit({})
    assert (result.written, result.duplicates) == (1, 1)
    assert [(r[0], r[1]) for r in rows_of(pg, unique_name)] == sorted(
        [(ids[0].decode(), 1), (ids[1].decode(), 2)]
    )

    # Values Arrow cannot read as this table's row: no CSV, the exact path decides.
    wrong = [b'{"big": "lots"}', b'{"big": 1.5}', b"[1, 2]", b'{"note": "a"', b'{"a":1}\n{"a":2}']
    for value in wrong:
        assert target.csv([record_id(["w"]).encode()], [3], [value]) is None, value

    # A column type with no exact Arrow type: never the fast path.
    other = f"{unique_name}_j"
    make_table(pg, other, "doc jsonb")
    assert target_for(pg_dsn, other).csv(ids[:1], [1], [b'{"doc": {"a": 1}}']) is None
    target.close()


@pytest.mark.parametrize(
    ("pg_type", "arrow"),
    [
        ("bigint", "int64"),
        ("real", "double"),
        ("character varying(40)", "string"),
        ("timestamp(3) with time zone", "string"),
        ("numeric(38,18)", "decimal128(38, 18)"),
        ("numeric(39,2)", None),
        ("numeric", None),
        ("jsonb", None),
        ("bytea", None),
        ("text[]", None),
    ],
)
def test_arrow_types_of_columns(pg_type: str, arrow: str | None) -> None:
    found = arrow_type(pg_type)
    assert (str(found) if found is not None else None) == arrow


# ---------------------------------------------------------------------- RangeReader


def transactional_topic(bootstrap: str, name: str) -> dict[int, int]:
    """Two partitions written in committed transactions (each commit marker takes an
    offset, so data offsets have gaps), one aborted transaction in between. Returns each
    partition's end."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, num_partitions=2, replication_factor=-1)])[name].result()
    producer = Producer(
        {"bootstrap.servers": bootstrap, "transactional.id": f"t-{name}", "linger.ms": 5}
    )
    producer.init_transactions(30)
    n = 0
    for txn in range(6):
        producer.begin_transaction()
        for _ in range(500):
            producer.produce(name, b"%d" % n, partition=n % 2)
            n += 1
        if txn == 3:
            producer.flush(30)  # on the broker, then aborted: its records stay in the log
            producer.abort_transaction(30)
        else:
            producer.commit_transaction(30)
    client = consumer(bootstrap, isolation="read_uncommitted")
    try:
        return {
            p: client.get_watermark_offsets(TopicPartition(name, p), timeout=10, cached=False)[1]
            for p in (0, 1)
        }
    finally:
        client.close()


@pytest.fixture
def range_topic(bootstrap: str, unique_name: str) -> Iterator[tuple[dict[int, int], RangeReader]]:
    """The transactional topic's partition ends, and a reader of it. A short timeout: a range
    ending at the partition's end must finish from the end-of-partition event seen by an
    EARLIER range (it comes once per assignment), not wait for another."""
    ends = transactional_topic(bootstrap, unique_name)
    client = consumer(bootstrap, isolation="read_uncommitted")
    try:
        yield ends, RangeReader(client, unique_name, timeout_s=5)
    finally:
        client.close()


def test_range_reader_reads_consecutive_ranges_once_each(
    range_topic: tuple[dict[int, int], RangeReader],
) -> None:
    ends, reader = range_topic
    seen: dict[int, list[int]] = {0: [], 1: []}
    start = {0: 0, 1: 0}
    for step in (700, 900, 10_000):
        ranges = {p: (start[p], min(ends[p], start[p] + step)) for p in (0, 1)}
        for batch in reader.read(ranges):
            for msg in batch:
                p, offset = msg.partition(), msg.offset()
                assert ranges[p][0] <= offset < ranges[p][1]
                seen[p].append(offset)
        start = {p: r[1] for p, r in ranges.items()}
    assert start == ends
    for p in (0, 1):
        assert seen[p] == sorted(set(seen[p])), "in order, none twice"
        assert len(seen[p]) == 1500, "1,500 records in each partition (250 of them aborted)"
        assert seen[p][-1] < ends[p]

    # A range that does not start where the last ended (a retry) re-assigns.
    again = [m.offset() for b in reader.read({0: (100, 300)}) for m in b]
    assert again == [o for o in seen[0] if 100 <= o < 300]


def test_range_reader_after_an_abandoned_read_reassigns(
    range_topic: tuple[dict[int, int], RangeReader],
) -> None:
    ends, reader = range_topic
    partial = reader.read({0: (0, ends[0])})
    first = next(partial)
    partial.close()  # the caller gave up midway (an error while sorting records)
    again = [m.offset() for b in reader.read({0: (0, ends[0])}) for m in b]
    assert again[: len(first)] == [m.offset() for m in first]
    assert len(again) == 1500
