"""The Elasticsearch sink: the family's protocol (:mod:`exactlyonce.connectors.search`) with
elasticsearch-py as its client (:mod:`.engine`)."""

from __future__ import annotations

from typing import ClassVar

from exactlyonce.connectors.elasticsearch.config import ElasticsearchSinkConfig
from exactlyonce.connectors.elasticsearch.engine import ELASTICSEARCH
from exactlyonce.connectors.search.engine import Engine
from exactlyonce.connectors.search.sink import SearchSink


class ElasticsearchSink(SearchSink):
    """Writes a stream into an Elasticsearch index exactly once.

    Guarantee: every record is in the index exactly once, under its record ID as ``_id``,
    through crashes, re-runs, rejected bulk items and lost bulk replies, provided the source
    replays and nothing else writes those ``_id``\\ s.

    Mechanism: deterministic ``_id``\\ s make every re-send a 409 (``create``) or an identical
    overwrite (``index``); a task writes its shard-commit document only after every item is
    acknowledged; the driver then advances the head document with optimistic concurrency.
    Retries follow ``retry_policy`` (by default ``retries`` retries, waits from 0.5 s
    doubling up to 30 s). The whole story is in :mod:`exactlyonce.connectors.search`.

    ``mode="upsert"``: one document per key, at the latest epoch that wrote it; an older
    epoch never overwrites a newer one. Mechanism: ``index``/``delete`` with the epoch as
    external version (``version_type=external_gte``), so Elasticsearch applies the guard; a
    409 is a no-op counted ``stale``. Deletes are guarded only for ``index.gc_deletes``.

    Tested against the stand-in ``lab/es_stand_in/`` (no Elasticsearch server can be
    installed where the tests run) and, through the same protocol code, against a genuine
    OpenSearch node (:class:`~exactlyonce.connectors.opensearch.OpenSearchSink`).

    Example::

        sink = ElasticsearchSink(hosts="https://es:9200", index="events", id_columns=["event_id"],
                                 query_name="clicks-to-es", api_key=os.environ["ES_API_KEY"])
        df.writeStream.foreachBatch(sink).option("checkpointLocation", ckpt).start()
    """

    kind = "elasticsearch"
    config_model: ClassVar[type[ElasticsearchSinkConfig]] = ElasticsearchSinkConfig
    engine: ClassVar[Engine] = ELASTICSEARCH
    config: ElasticsearchSinkConfig
