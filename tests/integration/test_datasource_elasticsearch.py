"""format("exactlyonce") into Elasticsearch: a real streaming query, the Elasticsearch
stand-in (lab/es_stand_in/, or a real cluster with ELASTICSEARCH_URL) and the real catalog.

Writes are counted per ``_id`` (the stand-in's write counters, or ``_version``), so a second
successful write of a document is caught though its ``_id`` is the same.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from exactlyonce.connectors.elasticsearch import ElasticsearchSink
from exactlyonce.dedup.ids import record_id
from tests.support.datasource_streams import (
    RICH_SCHEMA,
    make_rich_input,
    rerun_after_losing_commit,
    start_format,
    through_both_paths,
)
from tests.support.es_fixtures import EsHandle

# The services fixture puts the catalog's Redis in the environment these tests read.
pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("services")]


@pytest.fixture
def index(unique_name: str) -> str:
    return unique_name.replace("_", "-")


def es_options(es: EsHandle, index: str, **extra: str) -> dict[str, str]:
    return {
        "sink": "elasticsearch",
        "hosts": es.url,
        "index": index,
        "id_columns": "event_id",
        "query_name": index,
        "shards": "3",
        "dedup": json.dumps({"expected_ids": 5000}),
        "redis_url": os.environ["EXACTLYONCE_REDIS_URL"],
        **extra,
    }


def assert_written_once(es: EsHandle, index: str, event_ids: set[str]) -> None:
    writes = es.writes(index)
    assert writes == {record_id([e]): 1 for e in event_ids}, "each record written exactly once"


def letters(es: EsHandle, index: str) -> Counter[str]:
    """The dead letters, as what matters in them (not which query or index wrote them)."""
    kept = ("epoch", "shard", "record_id", "error", "payload")
    docs = es.docs(f"{index}-dead-letters").values()
    return Counter(json.dumps({k: d[k] for k in kept}, sort_keys=True) for d in docs)


def test_writes_every_record_once_and_a_rerun_epoch_is_skipped(
    spark: Any, tmp_path: Path, es: EsHandle, index: str
) -> None:
    event_ids = make_rich_input(tmp_path / "in", files=3, rows=100, seed=11)
    options = es_options(es, index)
    query = start_format(spark, tmp_path / "in", tmp_path / "ck", RICH_SCHEMA, **options)
    query.awaitTermination()
    assert_written_once(es, index, event_ids)
    assert sum(letters(es, index).values()) == 3, "one null-key record per file"
    head = ElasticsearchSink(es.url, index, ["event_id"], index, check=False).head()
    assert head is not None and (head.epoch, head.spark_query_id) == (2, str(query.id))

    rerun_after_losing_commit(spark, tmp_path / "in", tmp_path / "ck", RICH_SCHEMA, 2, **options)
    assert_written_once(es, index, event_ids)
    assert sum(letters(es, index).values()) == 3


def test_documents_match_the_foreachbatch_path(
    spark: Any, tmp_path: Path, es: EsHandle, index: str
) -> None:
    through_sink = f"{index}-fb"
    sink = ElasticsearchSink(es.url, through_sink, ["event_id"], through_sink, shards=3)
    through_both_paths(spark, tmp_path, sink, es_options(es, index), seed=12)
    expected = es.docs(through_sink)
    assert len(expected) > 50
    assert es.docs(index) == expected
    assert letters(es, index) == letters(es, through_sink)
