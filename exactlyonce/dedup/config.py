"""The dedup settings a sink takes (:class:`DedupConfig`), and the one seam to the catalog's Redis.

Built in the driver and shipped to Spark's executors, so it holds only values (and a picklable
``connect``); no connection is opened here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from exactlyonce.dedup.bloom import Backend, BloomSpec
from exactlyonce.errors import ConfigError

__all__ = ["DedupConfig", "connect_redis", "is_cluster_node"]


def connect_redis(url: str) -> Any:
    """The catalog's client unless ``DedupConfig.connect`` says otherwise: redis-py's
    ``RedisCluster`` when the server at ``url`` is a Redis Cluster node (``INFO cluster``
    says ``cluster_enabled:1``; any one node's URL will do, the client finds the others),
    else ``Redis``. The same ``redis://`` / ``rediss://`` URL serves both."""
    import redis

    single = redis.Redis.from_url(url, socket_timeout=30)
    if not is_cluster_node(single):
        return single
    single.close()
    from redis.cluster import RedisCluster

    return RedisCluster.from_url(url, socket_timeout=30)


def is_cluster_node(client: Any) -> bool:
    """Whether ``client``'s server runs in cluster mode (False if INFO is refused)."""
    import redis

    try:
        return int(client.info("cluster").get("cluster_enabled", 0)) == 1
    except redis.ResponseError:
        return False


@dataclass(frozen=True)
class DedupConfig:
    """Dedup settings.

    ``retention_epochs`` (default 1000) is the catalog's memory horizon: an ID marked at epoch
    ``e`` is recognised until at least epoch ``e + retention_epochs`` (whole generations of
    ``retention_epochs / 4`` epochs are deleted once all their epochs are that old, so at
    most about ``1.25 x retention_epochs`` epochs are held). A replay of a record older than
    that is no longer recognised by the catalog: the source must never replay so far back.
    A destination that keeps one record per ID (PostgreSQL ``mode="insert"``, Elasticsearch)
    still refuses the second copy; an appending one writes it again.

    ``expected_ids`` (default 1,000,000) is the number of distinct IDs the query writes in
    ``retention_epochs`` epochs, over all shards. Each generation's Bloom filter is sized for
    all of them (a burst may land in one generation); more than that and the filters answer
    "maybe" more often than ``fp_rate``, each "maybe" costing a catalog lookup. Sizing is
    fixed when the catalog is created and kept after restarts.

    ``connect`` is the one seam to the catalog's Redis: it gets ``redis_url`` and returns a
    redis-py-like client. None (the default) is :func:`connect_redis`: ``redis.Redis``, or
    ``redis.cluster.RedisCluster`` when ``redis_url`` names a Redis Cluster node.
    :mod:`exactlyonce.testing` passes an in-memory stand-in here; a
    real deployment leaves it alone (it must be picklable to reach Spark's executors).
    """

    redis_url: str
    expected_ids: int = 1_000_000
    fp_rate: float = 0.001
    retention_epochs: int = 1000
    bloom_backend: Backend = "numpy"
    on_catalog_loss: str = "rebuild"  # or "fail"
    chunk_ids: int = 200_000
    connect: Callable[[str], Any] | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        if not self.redis_url.startswith(("redis://", "rediss://", "unix://")):
            raise ConfigError("redis_url", "must be a redis://, rediss:// or unix:// URL")
        if self.expected_ids < 1:
            raise ConfigError("expected_ids", f"must be at least 1, got {self.expected_ids}")
        if self.retention_epochs < 1:
            raise ConfigError("retention_epochs", "must be at least 1")
        if self.on_catalog_loss not in ("rebuild", "fail"):
            raise ConfigError("on_catalog_loss", "must be 'rebuild' or 'fail'")
        BloomSpec(self.expected_ids, self.fp_rate, self.bloom_backend)

    def __repr__(self) -> str:
        return f"DedupConfig(expected_ids={self.expected_ids}, fp_rate={self.fp_rate}, ...)"

    def open_client(self) -> Any:
        """A new client for ``redis_url``, through ``connect`` if set (see the class doc)."""
        return (self.connect or connect_redis)(self.redis_url)
