"""Negative controls: one record a sink wrote, written AGAIN by a plain at-least-once client.

"A proof must be able to fail": after a test's audit finds every record written once, it
writes one of them again with a client that knows nothing of exactlyonce (psycopg, a
kafka-python producer, redis-py, HTTP with urllib) and shows that the same audit now counts
that record twice. Each function picks the record itself (the first the store returns),
writes it again as it is, and returns what identifies it to the audit.
"""

from __future__ import annotations

import json
import urllib.request
import warnings
from collections.abc import Callable, Mapping
from typing import Any

import psycopg
from psycopg import sql

from tests.support.es_fixtures import read_index
from tests.support.kafka_audit import read_topic
from tests.support.redis_fixtures import SinkRedis


def insert_again(conn: psycopg.Connection[Any], table: str, id_column: str = "record_id") -> str:
    """One row of ``table`` inserted again (``ON CONFLICT DO NOTHING``: where a unique index
    absorbs it, it is still one more attempt, which an attempts trigger sees). Returns the
    row's ``id_column`` as text."""
    column, name = sql.Identifier(id_column), sql.Identifier(table)
    first = conn.execute(
        sql.SQL("SELECT {}::text FROM {} ORDER BY 1 LIMIT 1").format(column, name)
    ).fetchone()
    assert first is not None, f"{table} is empty"
    conn.execute(
        sql.SQL(
            "INSERT INTO {t} SELECT * FROM {t} WHERE {c}::text = %s LIMIT 1 ON CONFLICT DO NOTHING"
        ).format(t=name, c=column),
        (first[0],),
    )
    return str(first[0])


def produce_again(bootstrap: str, topic: str) -> Any:
    """The topic's first record produced again (key, value, headers: the record ID header
    included; same partition) by a plain, non-transactional kafka-python producer. Returns
    the record."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        from kafka import KafkaProducer

        record = read_topic(bootstrap, topic)[0]
        producer = KafkaProducer(bootstrap_servers=bootstrap)
        producer.send(
            topic,
            value=record.value,
            key=record.key,
            headers=list(record.headers or []),
            partition=record.partition,
        )
        producer.flush()
        producer.close()
    return record


def xadd_again(server: SinkRedis, stream: str) -> dict[bytes, bytes]:
    """The stream's first entry appended again (``XADD``). Returns its fields."""
    client = server.client()
    _, fields = client.xrange(stream, count=1)[0]
    client.xadd(stream, fields)
    return dict(fields)


def set_again(server: SinkRedis, key_prefix: str) -> str:
    """One string key under ``key_prefix`` set again to its own value (``SET``). Returns the
    key."""
    client = server.client()
    key = next(client.scan_iter(match=f"{key_prefix}*", count=1000))
    client.set(key, client.get(key))
    return str(key.decode())


def index_again(url: str, index: str) -> str:
    """One document of ``index`` indexed again as it is (``PUT <index>/_doc/<_id>``, op_type
    index) over plain HTTP: Elasticsearch, the stand-in or OpenSearch. Returns its ``_id``."""
    doc_id, (_, source) = next(iter(read_index(url, index).items()))
    request = urllib.request.Request(
        f"{url}/{index}/_doc/{urllib.request.quote(doc_id, safe='')}",
        data=json.dumps(source).encode(),
        method="PUT",
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=30):
        pass
    return doc_id


def assert_audit_sees_it(
    what: str, audit: Callable[[], Mapping[str, int]], write_again: Callable[[], str]
) -> str:
    """``audit`` (writes per ID) counts the record ``write_again`` writes again (returning
    its ID as the audit keys it) twice where it counted it once, and nothing else changes.
    Returns the ID."""
    before = dict(audit())
    again = write_again()
    assert before.get(again) == 1, (
        f"{what}: {again} was not written once before: {before.get(again)}"
    )
    after = dict(audit())
    changed = {
        i: (before.get(i), after.get(i)) for i in {*before, *after} if before.get(i) != after.get(i)
    }
    assert changed == {again: (1, 2)}, (
        f"{what}: a second write of {again} went unseen, or more changed (before, after): "
        f"{dict(list(changed.items())[:5])}"
    )
    return again
