"""The OpenSearch sink: the family's protocol (:mod:`exactlyonce.connectors.search`) with
opensearch-py as its client (:mod:`.engine`, imported when the sink first connects)."""

from __future__ import annotations

from typing import ClassVar

from exactlyonce.connectors.opensearch.config import OpenSearchSinkConfig
from exactlyonce.connectors.search.engine import Client, Engine, Reach
from exactlyonce.connectors.search.sink import SearchSink


class _Lazy:
    """opensearch-py, imported on first connection: it is an optional extra, and the registry
    imports every built-in sink's kind (not its client) to list them."""

    name = "OpenSearch"

    def connect(self, conn: Reach) -> Client:
        from exactlyonce.connectors.opensearch.engine import OPENSEARCH

        return OPENSEARCH.connect(conn)


class OpenSearchSink(SearchSink):
    """Writes a stream into an OpenSearch index exactly once.

    Guarantee: every record is in the index exactly once, under its record ID as ``_id``,
    through crashes, re-runs, rejected bulk items, lost bulk replies and restarts of the
    OpenSearch node, provided the source replays and nothing else writes those ``_id``\\ s.
    ``mode="upsert"``: one document per key at the latest epoch that wrote it; an older epoch
    never overwrites a newer one (deletes guarded for ``index.gc_deletes`` only).

    Mechanism: the Elasticsearch family's protocol (:mod:`exactlyonce.connectors.search`),
    the same code as :class:`~exactlyonce.connectors.elasticsearch.ElasticsearchSink`:
    deterministic ``_id``\\ s (a re-send is a 409 with ``create``, an identical overwrite with
    ``index``), shard-commit documents written after every item is acknowledged, the head
    document advanced with ``if_seq_no``/``if_primary_term``, upserts with the epoch as
    external version. Only the client differs: opensearch-py (``pip install
    'exactlyonce[opensearch]'``). Tested against a genuine OpenSearch 2.19 node.

    Example::

        sink = OpenSearchSink(hosts="https://search:9200", index="events",
                              id_columns=["event_id"], query_name="clicks-to-os",
                              basic_auth=("writer", os.environ["OS_PASSWORD"]))
        df.writeStream.foreachBatch(sink).option("checkpointLocation", ckpt).start()
    """

    kind = "opensearch"
    config_model: ClassVar[type[OpenSearchSinkConfig]] = OpenSearchSinkConfig
    engine: ClassVar[Engine] = _Lazy()
    config: OpenSearchSinkConfig
