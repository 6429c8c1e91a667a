"""format("exactlyonce") into Redis (hash and string writes): a real streaming query, the
sink's own redis-server (tests/support/redis_fixtures.py) and the real catalog.

Writes are counted in the sink's AOF (every HSET/SET a script ran), so a second write of a key
is caught though it left the same value.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from exactlyonce.connectors.redis import RedisSink
from tests.support.datasource_streams import (
    RICH_SCHEMA,
    make_rich_input,
    rerun_after_losing_commit,
    start_format,
    through_both_paths,
)
from tests.support.redis_fixtures import SinkRedis

# The services fixture puts the catalog's Redis in the environment these tests read.
pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("services")]

TEMPLATES = {"hash": "{name}:{{event_id}}", "string": "{name}:{{action}}:{{event_id}}"}


def redis_options(
    server: SinkRedis, name: str, write: str = "hash", **extra: str
) -> dict[str, str]:
    return {
        "sink": "redis",
        "url": server.url,
        "key_template": TEMPLATES[write].format(name=name),
        "write": write,
        "id_columns": "event_id",
        "query_name": name,
        "shards": "3",
        "dedup": json.dumps({"expected_ids": 5000}),
        "redis_url": os.environ["EXACTLYONCE_REDIS_URL"],
        **extra,
    }


def stored(server: SinkRedis, name: str, write: str) -> dict[str, Any]:
    """Every key the query wrote (its name cut off) and its value."""
    r = server.client()
    keys = [k.decode() for k in r.scan_iter(match=f"{name}:*")]
    read = r.get if write == "string" else r.hgetall
    return {k.removeprefix(f"{name}:"): read(k) for k in keys}


def letters(server: SinkRedis, name: str) -> Counter[str]:
    """The dead letters, as what matters in them (not which query wrote them)."""
    sink = RedisSink(server.url, name + ":{event_id}", ["event_id"], query_name=name, check=False)
    entries = server.client().xrange(sink.dead_letter_key)
    kept = (b"epoch", b"shard", b"record_id", b"error", b"payload")
    return Counter(
        json.dumps({k.decode(): v.decode() for k, v in fields.items() if k in kept}, sort_keys=True)
        for _, fields in entries
    )


def test_writes_every_record_once_and_a_rerun_epoch_is_skipped(
    spark: Any, tmp_path: Path, sink_redis: SinkRedis, unique_name: str
) -> None:
    event_ids = make_rich_input(tmp_path / "in", files=3, rows=100, seed=21)
    options = redis_options(sink_redis, unique_name)
    query = start_format(spark, tmp_path / "in", tmp_path / "ck", RICH_SCHEMA, **options)
    query.awaitTermination()
    expected = Counter({f"{unique_name}:{e}": 1 for e in event_ids})
    assert sink_redis.write_counts("HSET", f"{unique_name}:") == expected
    assert sum(letters(sink_redis, unique_name).values()) == 3, "one null-key record per file"
    sink = RedisSink(sink_redis.url, options["key_template"], ["event_id"], unique_name)
    head = sink.head()
    assert head is not None and (head.epoch, head.spark_query_id) == (2, str(query.id))

    rerun_after_losing_commit(spark, tmp_path / "in", tmp_path / "ck", RICH_SCHEMA, 2, **options)
    assert sink_redis.write_counts("HSET", f"{unique_name}:") == expected
    assert sum(letters(sink_redis, unique_name).values()) == 3


@pytest.mark.parametrize("write", ["hash", "string"])
def test_keys_and_values_match_the_foreachbatch_path(
    spark: Any, tmp_path: Path, sink_redis: SinkRedis, unique_name: str, write: str
) -> None:
    """String writes' template names ``action`` too: a null one makes a bad record."""
    fb = f"{unique_name}fb"
    template = TEMPLATES[write].format(name=fb)
    sink = RedisSink(sink_redis.url, template, ["event_id"], query_name=fb, write=write, shards=3)  # type: ignore[arg-type]
    through_both_paths(spark, tmp_path, sink, redis_options(sink_redis, unique_name, write), 22)
    expected = stored(sink_redis, fb, write)
    assert len(expected) > 40
    assert stored(sink_redis, unique_name, write) == expected
    assert letters(sink_redis, unique_name) == letters(sink_redis, fb)
