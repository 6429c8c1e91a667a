"""The Elasticsearch family's Real-time Mode writer (``realtime()``): records by ``_id``,
then the source frontiers, each moved only from the version the writer read. Against a GENUINE
OpenSearch node (OpenSearchSink), and against the Elasticsearch stand-in
(lab/es_stand_in/: no Elasticsearch server is installable here) for ElasticsearchSink.

Drives the writer as Spark's task does (``open``/``process``/``close``). ``op_type="index"``,
so a second write of a record is a second ``_version``; versions and documents are read over
plain HTTP (tests/support/opensearch_http.py), never through the sink's client.
"""

from __future__ import annotations

import pickle
from typing import Any

import pytest
from pyspark.sql.types import StructType

from exactlyonce.connectors.base.frontier import source_record_id
from exactlyonce.connectors.base.realtime import RealtimeWriter
from exactlyonce.connectors.elasticsearch import ElasticsearchSink
from exactlyonce.connectors.opensearch import OpenSearchSink
from exactlyonce.connectors.search.sink import SearchSink
from exactlyonce.errors import ConfigError, FrontierMovedError
from exactlyonce.retry import RetryPolicy
from tests.support import opensearch_http as http
from tests.support.es_fixtures import EsHandle
from tests.support.opensearch_node import OpenSearchNode
from tests.support.realtime import rows, run_epoch, source_schema

pytestmark = pytest.mark.integration

FAST = RetryPolicy(attempts=4, initial_s=0.05, max_s=0.5)
SCHEMA = source_schema()


Engine = tuple[str, type[SearchSink]]  # the engine's URL, and the sink class for it


@pytest.fixture(params=["opensearch", "elasticsearch"])
def engine(request: pytest.FixtureRequest) -> Engine:
    """(url, sink class): a genuine OpenSearch node, or the Elasticsearch stand-in."""
    if request.param == "opensearch":
        node: OpenSearchNode = request.getfixturevalue("opensearch")
        return node.url, OpenSearchSink
    handle: EsHandle = request.getfixturevalue("es")
    return handle.url, ElasticsearchSink


@pytest.fixture
def index(unique_name: str, services: dict[str, str]) -> str:
    """An index name; the services (the catalog's Redis: dedup is on by default) run."""
    return unique_name.replace("_", "-")


def sink_of(engine: Engine, index: str, **options: Any) -> SearchSink:
    url, sink = engine
    settings = {"id_from": "content", "op_type": "index", "retry_policy": FAST, **options}
    return sink(url, index, None, query_name=index, **settings)


def writer_of(engine: Engine, index: str) -> RealtimeWriter:
    return sink_of(engine, index).realtime(SCHEMA, commit_interval=60)


def ids(offsets: range, partition: int = 0) -> set[str]:
    return {source_record_id("t", partition, o) for o in offsets}


def test_a_rerun_skips_what_the_frontier_covers(engine: Engine, index: str) -> None:
    run_epoch(writer_of(engine, index), 3, [*rows(range(10)), *rows(range(4), 1)])
    sink = sink_of(engine, index)
    assert sink.source_frontiers() == {("t", 0): 10, ("t", 1): 4}
    again = writer_of(engine, index)
    run_epoch(again, 3, [*rows(range(15)), *rows(range(6), 1)])  # the epoch, re-run, longer
    assert again.tracker.skipped == 14
    versions = http.versions(engine[0], index)
    assert versions == {i: 1 for i in ids(range(15)) | ids(range(6), 1)}  # each written once
    assert sink.source_frontiers() == {("t", 0): 15, ("t", 1): 6}
    docs = http.docs(engine[0], index)
    assert docs[source_record_id("t", 0, 14)]["event_id"] == "e14"


def test_a_writer_whose_frontier_moved_writes_nothing(engine: Engine, index: str) -> None:
    slow, fast = writer_of(engine, index), writer_of(engine, index)
    slow.open(0, 1)
    slow.process(rows(range(1))[0])  # reads the frontier: none yet
    run_epoch(fast, 1, rows(range(5)))  # another attempt of the task commits first
    with pytest.raises(FrontierMovedError, match="moved it"):
        slow.close(None)
    assert http.versions(engine[0], index) == {i: 1 for i in ids(range(5))}
    assert sink_of(engine, index).source_frontiers() == {("t", 0): 5}


def test_refusals_before_the_stream(engine: Engine, index: str) -> None:
    with pytest.raises(ConfigError, match="upsert"):
        engine[1](engine[0], index, ["event_id"], query_name=index, mode="upsert").realtime(SCHEMA)
    without_offset = StructType([f for f in SCHEMA.fields if f.name != "offset"])
    with pytest.raises(ConfigError, match=r"source_columns.*\['offset'\]"):
        sink_of(engine, index).realtime(without_offset)


def test_the_writer_pickles_without_a_client(engine: Engine, index: str) -> None:
    writer = writer_of(engine, index)
    writer.open(0, 0)
    writer.process(rows(range(1))[0])
    copy = pickle.loads(pickle.dumps(writer))
    writer.close(RuntimeError("stop"))
    assert copy.store is None and copy.lock is None and copy.options == writer.options
    assert sink_of(engine, index).source_frontiers() == {}
