"""Names of the catalog's Redis keys, per (query, sink).

All keys share one ``{hash tag}`` (:func:`namespace`), so a Redis Cluster keeps a query's keys
together. Under the prefix ``<p>``:

``<p>:meta``                         HASH: ``instance`` (random, new whenever the catalog is
                                     created), and the sizing fixed at creation
``<p>:c:<shard>:<gen>:<bucket>``     STRING of 16-byte IDs, appended to (bucket in hex): about
                                     17 bytes per live ID (a SET costs 80, a listpack HASH 25-45)
``<p>:j:<shard>:<epoch>``            the IDs first marked in an epoch the head has not passed
                                     yet (a journal), to roll them back on restart
``<p>:b:<shard>:<gen>`` / ``:bv:``    the shard's Bloom filter for a generation, and its version
``<p>:stats``                        HASH of usage counters per generation, kept by the scripts:
                                     ``ids:<gen>`` IDs held, ``bytes:<gen>`` Redis memory of the
                                     generation's bucket and filter keys (``MEMORY USAGE``)
``<p>:tmp:<random>``                 a delta filter, only inside one MULTI

The Redis sink builds its own keys under ``namespace(query, sink) + ":sink"``.
"""

from __future__ import annotations

import hashlib
import re
import uuid
from dataclasses import dataclass

__all__ = ["CatalogKeys", "namespace"]


def namespace(query_name: str, sink_name: str) -> str:
    """The key prefix of a (query, sink): a hash tag of the query name and a short digest."""
    digest = hashlib.sha1(f"{query_name}\0{sink_name}".encode()).hexdigest()[:10]
    return f"eo:{{{query_name}:{digest}}}"


@dataclass(frozen=True)
class CatalogKeys:
    """Every key of one catalog, from its prefix (see the module doc for what each holds)."""

    prefix: str

    @property
    def meta(self) -> str:
        return f"{self.prefix}:meta"

    @property
    def stats(self) -> str:
        return f"{self.prefix}:stats"

    def bucket_prefix(self, shard: int, gen: int) -> str:
        return f"{self.prefix}:c:{shard}:{gen}:"

    def bucket(self, shard: int, gen: int, bucket: int) -> str:
        return f"{self.bucket_prefix(shard, gen)}{bucket:x}"

    def journal(self, shard: int, epoch: int) -> str:
        return f"{self.prefix}:j:{shard}:{epoch}"

    @property
    def journals(self) -> str:
        """SCAN pattern of every journal key."""
        return f"{self.prefix}:j:*"

    @staticmethod
    def parse_journal(key: str) -> tuple[int, int]:
        """(shard, epoch) of a journal key."""
        _, _, shard, epoch = key.rsplit(":", 3)
        return int(shard), int(epoch)

    def bloom(self, shard: int, gen: int) -> str:
        return f"{self.prefix}:b:{shard}:{gen}"

    def bloom_version(self, shard: int, gen: int) -> str:
        return f"{self.prefix}:bv:{shard}:{gen}"

    def tmp(self) -> str:
        """A fresh, unique scratch key."""
        return f"{self.prefix}:tmp:{uuid.uuid4().hex}"

    @property
    def everything(self) -> str:
        """SCAN pattern of every key under the prefix (its glob characters escaped). It also
        matches the Redis sink's own keys of the same (query, sink) (``<p>:sink:*``: its head,
        markers, dead letters) when they share a Redis: never delete by it, see
        :attr:`patterns`."""
        return _glob_escaped(self.prefix) + ":*"

    @property
    def patterns(self) -> list[str]:
        """SCAN patterns of exactly this catalog's keys (meta, stats, buckets, journals,
        filters, scratch), and of no key the Redis sink keeps under the same prefix."""
        base = _glob_escaped(self.prefix)
        names = ("meta", "stats", "c:*", "j:*", "b:*", "bv:*", "tmp:*")
        return [f"{base}:{name}" for name in names]


def _glob_escaped(text: str) -> str:
    return re.sub(r"([*?\[\]\\])", r"\\\1", text)
