"""Names of the catalog's Redis keys, per (query, sink) and per (query, sink, shard).

Layout 3 (this one) is layout 2 plus a journal index per shard (``<s>:ji``, below): a restart
finds the journals it must roll back there, instead of walking the presence record, which has
a field per bucket. A catalog in layout 2 is read as it is (its journals by the walk);
``layout`` in meta says which.

Layout 2 spreads a catalog over a Redis Cluster: each shard's keys share their own
hash tag, so one shard's keys sit in one slot (a script may touch them together) and the
shards spread over the masters. Two tags, from :func:`namespace`'s prefix ``<p>`` =
``eo:{<query>:<digest>}``:

- per query, one slot, tag ``{<query>:<digest>}``:

  ``<p>:meta``       HASH: ``instance`` (random, new whenever the catalog is created), the
                     sizing fixed at creation, and ``layout`` = ``2``

- per (query, shard), one slot per shard, prefix ``<s>`` = ``eo:{<query>:<digest>:<shard>}``
  (:meth:`CatalogKeys.shard_prefix`):

  ``<s>:i``                 STRING: the instance this shard's keys belong to. Every script
                            checks it (not meta: another slot), so a master that restarted
                            empty answers CATALOG_LOST for exactly its own shards
  ``<s>:c:<gen>:<bucket>``  STRING of 16-byte IDs, appended to (bucket in hex): about 17 bytes
                            per live ID (a SET costs 80, a listpack HASH 25-45)
  ``<s>:j:<epoch>``         the IDs first marked in an epoch the head has not passed yet (a
                            journal), to roll them back on restart
  ``<s>:ji``                HASH (layout 3), the journal index: ``i`` = the instance, and a
                            field ``<epoch>`` per journal, written in the same MULTI as the
                            journal and deleted with it. An index that is gone or names
                            another instance (evicted) is not trusted: the restart walks the
                            presence record instead
  ``<s>:b:<gen>`` / ``<s>:bv:<gen>``  the shard's Bloom filter for a generation, its version
  ``<s>:p``                 HASH, the shard's presence record (catalogs created with
                            ``presence`` = ``1`` in meta): ``i`` = the instance, and one field
                            per key that must exist: ``c:<gen>:<bucket>`` per bucket,
                            ``b:<gen>`` per Bloom filter, ``j:<epoch>`` per journal. A key it
                            names that is gone (evicted: ``maxmemory`` with an ``allkeys-*``
                            policy) is a partial loss: the script or read that finds it
                            deletes the shard's marker and answers CATALOG_LOST, so the keeper
                            sees the shard lost and rebuilds (or refuses), never reading the
                            gap as "never seen"
  ``<s>:stats``             HASH of the shard's usage counters per generation, kept by the
                            scripts: ``ids:<gen>`` IDs held, ``bytes:<gen>`` Redis memory of the
                            generation's bucket and filter keys. Readers sum them over shards
  ``<s>:tmp:<random>``      a delta filter, only inside one script
  ``<s>:cl:<epoch>``        HASH: claims of the Spark data source path (ID -> the Spark
                            partition that writes it; :mod:`.claims`), while the epoch is
                            above the head
  ``<s>:pt:<epoch>``        (shard 0 only) HASH: Spark partition -> the fingerprint of its
                            input, for the same path (:mod:`.claims`)

Every script names all of its keys in ``KEYS``, and they are all of one shard: the marker,
the stats hash, the buckets or the filter (see :mod:`.scripts`), so Redis Cluster never
answers CROSSSLOT. Nothing needs meta and a shard's keys in one atomic step: creation writes
the shard markers before meta, and loss is detected per shard by the markers (the keeper
reads meta and every marker before each epoch).

Layout 1 (before Redis Cluster support) kept every key under ``<p>`` (one slot per query:
``<p>:c:<shard>:<gen>:<bucket>``, ``<p>:j:<shard>:<epoch>``, ``<p>:b:...``, ``<p>:stats``)
and its meta has no ``layout`` field. :mod:`.upgrade` renames such a catalog into layout 2
on a standalone Redis; on a cluster it is dropped and treated as lost. A ``layout`` this
version does not know (a newer one) is refused, never rewritten.

Going back to a version that knows only layout 2 is safe: that version takes a layout-3
catalog for layout 1 (its only other case), moves nothing (no key matches layout 1's names)
and sets ``layout`` to 2; its journals then go unindexed, and this version, reading layout 2,
walks the presence record for them again.

The Redis sink builds its own keys under ``namespace(query, sink) + ":sink"``; no pattern
here matches them. Every key of this module, of every query, begins with
:data:`NAMESPACE_ROOT` (``eo:{``): a Redis sink never writes a record under it (DESIGN
invariant 14), so data keys cannot overwrite a catalog that shares the sink's Redis.
"""

from __future__ import annotations

import hashlib
import re
import uuid
from dataclasses import dataclass
from functools import cached_property

__all__ = [
    "INDEXED_LAYOUT",
    "KNOWN_LAYOUTS",
    "NAMESPACE_ROOT",
    "UNINDEXED_LAYOUT",
    "CatalogKeys",
    "namespace",
]

INDEXED_LAYOUT = "3"  # layout 2 with a journal index per shard: what new catalogs get
UNINDEXED_LAYOUT = "2"  # one hash tag per shard; journals found by the presence record
KNOWN_LAYOUTS = (UNINDEXED_LAYOUT, INDEXED_LAYOUT)  # opened as they are (no "layout": 1)
NAMESPACE_ROOT = "eo:{"  # the start of every catalog key (and of the Redis sink's default prefix)
SHARD_KINDS = ("i", "p", "stats", "c", "j", "ji", "b", "bv", "tmp", "cl", "pt")
OLD_KINDS = ("stats", "c", "j", "b", "bv", "tmp")  # layout 1, under the query's prefix


def namespace(query_name: str, sink_name: str) -> str:
    """The key prefix of a (query, sink): a hash tag of the query name and a short digest."""
    digest = hashlib.sha1(f"{query_name}\0{sink_name}".encode()).hexdigest()[:10]
    return f"{NAMESPACE_ROOT}{query_name}:{digest}}}"


@dataclass(frozen=True)
class CatalogKeys:
    """Every key of one catalog, from its prefix (see the module doc for what each holds)."""

    prefix: str

    @property
    def meta(self) -> str:
        return f"{self.prefix}:meta"

    def shard_prefix(self, shard: int) -> str:
        """``eo:{<query>:<digest>:<shard>}``: the shard's own hash tag."""
        return f"{self.prefix[:-1]}:{shard}}}"

    def marker(self, shard: int) -> str:
        return f"{self.shard_prefix(shard)}:i"

    def presence(self, shard: int) -> str:
        return f"{self.shard_prefix(shard)}:p"

    def stats(self, shard: int) -> str:
        return f"{self.shard_prefix(shard)}:stats"

    def bucket_prefix(self, shard: int, gen: int) -> str:
        return f"{self.shard_prefix(shard)}:c:{gen}:"

    def bucket(self, shard: int, gen: int, bucket: int) -> str:
        return f"{self.bucket_prefix(shard, gen)}{bucket:x}"

    def journal(self, shard: int, epoch: int) -> str:
        return f"{self.shard_prefix(shard)}:j:{epoch}"

    def journal_index(self, shard: int) -> str:
        """The shard's journal index (layout 3): ``i`` and a field per journal's epoch."""
        return f"{self.shard_prefix(shard)}:ji"

    def bloom(self, shard: int, gen: int) -> str:
        return f"{self.shard_prefix(shard)}:b:{gen}"

    def bloom_version(self, shard: int, gen: int) -> str:
        return f"{self.shard_prefix(shard)}:bv:{gen}"

    def claims(self, shard: int, epoch: int) -> str:
        return f"{self.shard_prefix(shard)}:cl:{epoch}"

    def partitions(self, epoch: int) -> str:
        """The registry of an epoch's Spark partitions, in shard 0's slot (checked against
        shard 0's marker)."""
        return f"{self.shard_prefix(0)}:pt:{epoch}"

    @property
    def claim_keys(self) -> list[str]:
        """SCAN patterns of every claims and registry key (filter with :meth:`parse_claims`)."""
        return [f"{self._shard_glob}:cl:*", f"{self._shard_glob}:pt:*"]

    def parse_claims(self, key: str) -> int | None:
        """The epoch of one of this catalog's claims or registry keys; None for any other."""
        found = self._shard_key.match(key)
        if found is None or found["kind"] not in ("cl", "pt"):
            return None
        return int(found["rest"])

    def tmp(self, shard: int) -> str:
        """A fresh, unique scratch key in the shard's slot."""
        return f"{self.shard_prefix(shard)}:tmp:{uuid.uuid4().hex}"

    # -- finding keys by SCAN (every master of a cluster) ------------------------------

    @property
    def journals(self) -> str:
        """SCAN pattern of every journal key (filter the hits with :meth:`parse_journal`)."""
        return f"{self._shard_glob}:j:*"

    def parse_journal(self, key: str) -> tuple[int, int] | None:
        """(shard, epoch) of one of this catalog's journal keys; None for any other key."""
        found = self._shard_key.match(key)
        if found is None or found["kind"] != "j":
            return None
        return int(found["shard"]), int(found["rest"])

    @property
    def everything(self) -> str:
        """SCAN pattern of every key under the query's prefix (its glob characters escaped),
        layout 1 included. It also matches the Redis sink's own keys of the same (query, sink)
        (``<p>:sink:*``: its head, markers, dead letters) when they share a Redis: never
        delete by it, see :attr:`patterns`. Shard keys match :attr:`shard_keys`."""
        return _glob_escaped(self.prefix) + ":*"

    @property
    def shard_keys(self) -> str:
        """SCAN pattern of every shard key (filter the hits with :meth:`owns`)."""
        return f"{self._shard_glob}:*"

    @property
    def patterns(self) -> list[str]:
        """SCAN patterns of this catalog's keys, in both layouts, and of no key the Redis sink
        keeps under the same prefix. A shard pattern may match another query's keys whose
        name extends this one's: keep only the hits :meth:`owns` accepts."""
        base = _glob_escaped(self.prefix)
        old = [f"{base}:{kind}" if kind == "stats" else f"{base}:{kind}:*" for kind in OLD_KINDS]
        return [f"{base}:meta", *old, self.shard_keys]

    def owns(self, key: str) -> bool:
        """Whether ``key`` is one of this catalog's keys (either layout), never a sink key."""
        if self._shard_key.match(key):
            return True
        rest = key[len(self.prefix) + 1 :] if key.startswith(self.prefix + ":") else None
        if rest is None:
            return False
        kind = rest.partition(":")[0]
        return rest in ("meta", "stats") or (kind in OLD_KINDS and ":" in rest)

    @property
    def _shard_glob(self) -> str:
        return f"{_glob_escaped(self.prefix[:-1])}:*}}"

    @cached_property
    def _shard_key(self) -> re.Pattern[str]:
        kinds = "|".join(SHARD_KINDS)
        return re.compile(
            rf"{re.escape(self.prefix[:-1])}:(?P<shard>\d+)\}}:(?P<kind>{kinds})(?::(?P<rest>.*))?\Z",
            re.DOTALL,
        )


def _glob_escaped(text: str) -> str:
    return re.sub(r"([*?\[\]\\])", r"\\\1", text)
