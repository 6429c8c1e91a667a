"""Operations on a query's durable state outside the write path (``exactlyonce reset-head``,
the demo's fresh start): what the CLI commands and the demo share."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from exactlyonce.connectors.base import ExactlyOnceSink


def drop_catalog(sink: ExactlyOnceSink) -> int:
    """Delete the query's Redis dedup catalog; returns the number of keys deleted.

    The catalog caches what the head committed. Without the head it is stale: a new run
    would take every ID it holds for a duplicate and drop the record.
    """
    if sink.dedup_config is None:
        return 0
    from exactlyonce.dedup.catalog import RedisCatalog

    catalog = RedisCatalog(sink.dedup_config, sink.query_name, sink.sink_name)
    try:
        return catalog.drop()
    finally:
        catalog.close()
