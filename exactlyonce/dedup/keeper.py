"""Driver-side life of a catalog: open, detect loss, roll back, rebuild, expire.

The sink head is the truth; the catalog is a cache of it (DESIGN invariant 4). On every start
and before every epoch the driver checks the catalog's ``instance``. When Redis lost it:

- a sink that can list its own recent IDs (``rebuild_source``) rebuilds the catalog from them
  for the retention window, then goes on;
- a sink with a unique key (PostgreSQL ``mode="insert"``, Elasticsearch ``_id``) starts an
  empty catalog: its keys keep it exactly-once, the catalog only saves work;
- with ``on_catalog_loss="fail"``, or a sink that can do neither, it refuses with
  :class:`CatalogLostError`, and never guesses.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import numpy.typing as npt

from exactlyonce.dedup.bloom import ids_from_hex
from exactlyonce.dedup.catalog import CatalogUsage, RedisCatalog
from exactlyonce.dedup.config import DedupConfig
from exactlyonce.dedup.keys import KNOWN_LAYOUTS
from exactlyonce.dedup.layout import Layout
from exactlyonce.dedup.murmur3 import spark_shard
from exactlyonce.dedup.shard import DedupPlan
from exactlyonce.dedup.upgrade import upgrade_layout
from exactlyonce.errors import CatalogLostError, ConfigError
from exactlyonce.progress import Progress

log = logging.getLogger("exactlyonce.dedup")

# Chunks of (32-hex-character IDs, their epochs) that the sink holds from ``from_epoch`` on.
RebuildSource = Callable[[int], Iterator[tuple[npt.NDArray[np.bytes_], npt.NDArray[np.int64]]]]


class CatalogKeeper:
    def __init__(
        self,
        config: DedupConfig,
        query_name: str,
        sink_name: str,
        unique_sink: bool,
        rebuild_source: RebuildSource | None,
    ) -> None:
        self.config = config
        self.query_name = query_name
        self.sink_name = sink_name
        self.unique_sink = unique_sink
        self.rebuild_source = rebuild_source
        self.catalog = RedisCatalog(config, query_name, sink_name)
        self.instance: str | None = None
        self.layout: Layout | None = None
        self.rebuilds = 0

    @property
    def plan(self) -> DedupPlan:
        assert self.instance is not None and self.layout is not None
        return DedupPlan(self.config, self.query_name, self.sink_name, self.instance, self.layout)

    def open(self, head_epoch: int, shards: int) -> None:
        """At (re)start: adopt the catalog, roll back epochs above the head, or handle loss."""
        meta = self.catalog.meta()
        if meta and head_epoch < 0:
            # The catalog outlived its head (a reset head, or a dropped head table). It
            # caches IDs of a past run: trusting it would drop new records as duplicates.
            dropped = self.catalog.drop()
            log.warning(
                "%s: discarded a catalog left by an earlier head (%d keys)",
                self.sink_name,
                dropped,
            )
            meta = {}
        why = "no catalog found for a query that has committed epochs"
        if meta and meta.get("layout") is None:
            meta = upgrade_layout(self.catalog, meta)
            why = "the catalog was in layout 1, which a Redis Cluster cannot hold"
        if not meta:
            self.layout = Layout.plan(self.config, shards)
            if head_epoch < 0:
                self.instance = self.catalog.create(self.layout)
                return
            self._recover(head_epoch, why)
            return
        self._refuse_unknown_layout(meta.get("layout"))
        self.layout = Layout.from_meta(meta)
        self.instance = meta["instance"]
        if not self.catalog.holds_instance(self.instance, self.layout.shards):
            self._recover(head_epoch, "part of the catalog was lost (a master restarted empty?)")
            return
        try:
            removed = self.catalog.roll_back_above(self.layout, head_epoch)
        except CatalogLostError:
            self._recover(head_epoch, "part of the catalog was lost (a journal was evicted)")
            return
        if removed:
            log.info("catalog: rolled back %d IDs of epochs above head %d", removed, head_epoch)

    def _refuse_unknown_layout(self, layout: str | None) -> None:
        """A layout this version does not know was written by a newer one: reading it with
        these key names could take a full catalog for an empty one (invariant 3)."""
        if layout is not None and layout not in KNOWN_LAYOUTS:
            raise ConfigError(
                "dedup",
                f"the catalog {self.catalog.prefix} is in key layout {layout}, which this "
                f"version of exactlyonce does not know (it reads layouts "
                f"{', '.join(KNOWN_LAYOUTS)}): run the version that wrote it, or a newer one",
            )

    def attach(self) -> bool:
        """Adopt the catalog as it is, rolling nothing back: for a driver process that only
        advances heads (:meth:`after_head`) while another opened the catalog. False when there
        is none."""
        meta = self.catalog.meta()
        if not meta:
            return False
        self._refuse_unknown_layout(meta.get("layout"))
        self.layout = Layout.from_meta(meta)
        self.instance = meta["instance"]
        return True

    def ensure(self, head_epoch: int) -> None:
        """Before an epoch: is the catalog still the one we opened, on every shard?"""
        if self.lost(raising=True):
            self._recover(head_epoch, "the catalog's Redis lost its data")

    def reachable(self) -> bool:
        """Whether the catalog's Redis answers now."""
        try:
            self.catalog.redis.ping()
        except Exception:
            return False
        return True

    def recoverable(self) -> bool:
        """After a failed write: was it the catalog (lost or unreachable), so that a retry
        after :meth:`ensure` may succeed? Anything else is the caller's to raise."""
        return self.lost() or not self.reachable()

    def lost(self, raising: bool = False) -> bool:
        """Whether meta or any shard marker no longer names our instance (a Redis, or one
        master of a cluster, lost its data). Unreachable is not lost: False, the caller
        retries (or, with ``raising``, the error is raised)."""
        assert self.instance is not None and self.layout is not None
        try:
            return not self.catalog.holds_instance(self.instance, self.layout.shards)
        except Exception:
            if raising:
                raise
            return False

    def _recover(self, head_epoch: int, why: str) -> None:
        assert self.layout is not None
        if self.config.on_catalog_loss == "fail":
            raise CatalogLostError(
                f"{self.sink_name}: {why}; on_catalog_loss='fail' refuses to guess. Restore "
                "Redis, or set on_catalog_loss='rebuild'."
            )
        if self.rebuild_source is not None:
            self._rebuild(head_epoch)
        elif self.unique_sink:
            self.instance = self.catalog.create(self.layout)
            log.warning(
                "%s: %s; started an empty catalog (the sink's unique key keeps "
                "writes exactly-once)",
                self.sink_name,
                why,
            )
        else:
            raise CatalogLostError(
                f"{self.sink_name}: {why}, and this append-only sink cannot rebuild it. "
                "Refusing to write: duplicates could not be detected."
            )
        self.rebuilds += 1

    def _rebuild(self, head_epoch: int) -> None:
        """A new catalog filled from the sink's own IDs for the retention window (a bar on a
        terminal, a line every few seconds elsewhere: :class:`~exactlyonce.progress.Progress`)."""
        assert self.layout is not None and self.rebuild_source is not None
        self.instance = self.catalog.create(self.layout)
        start = max(0, min(self.layout.live(head_epoch + 1)) * self.layout.gen_epochs)
        total = 0
        with Progress(f"{self.sink_name}: catalog rebuild", unit="IDs") as progress:
            for hex_ids, epochs in self.rebuild_source(start):
                self._rebuild_chunk(hex_ids, epochs, head_epoch)
                total += len(hex_ids)
                progress.update(len(hex_ids))
        log.warning(
            "%s: catalog rebuilt from the sink: %d IDs from epoch %d on",
            self.sink_name,
            total,
            start,
        )

    def _rebuild_chunk(
        self, hex_ids: npt.NDArray[np.bytes_], epochs: npt.NDArray[np.int64], head_epoch: int
    ) -> None:
        """Mark one chunk of the sink's IDs (with their epochs) in the new catalog."""
        assert self.layout is not None and self.instance is not None
        layout = self.layout
        ids = ids_from_hex(hex_ids)
        shards = spark_shard(hex_ids, layout.shards)
        for shard in np.unique(shards):
            for epoch in np.unique(epochs[shards == shard]):
                chunk = ids[(shards == shard) & (epochs == epoch)]
                delta = layout.bloom.empty()
                delta.add(chunk)
                gen = layout.gen(int(epoch))
                self.catalog.merge_bloom(self.instance, int(shard), gen, delta, layout.tracked)
                self.catalog.mark(
                    self.instance,
                    layout,
                    int(shard),
                    int(epoch),
                    chunk,
                    journal=int(epoch) > head_epoch,
                )

    def mark_written(self, source: Iterator[tuple[Any, Any]], head_epoch: int) -> int:
        """Mark IDs the sink holds (hex IDs and their epochs, in chunks), journaled when
        above ``head_epoch``; the number marked."""
        total = 0
        for hex_ids, epochs in source:
            self._rebuild_chunk(hex_ids, epochs, head_epoch)
            total += len(hex_ids)
        return total

    def usage(self, epoch: int) -> CatalogUsage | None:
        """The catalog's live IDs and bytes with the head at ``epoch`` (one pipelined HGETALL
        per shard); None when Redis does not answer: it only informs the batch report."""
        assert self.layout is not None
        try:
            return self.catalog.usage(self.layout, epoch)
        except Exception as exc:
            log.debug("%s: catalog usage not read: %s", self.sink_name, type(exc).__name__)
            return None

    def after_head(self, epoch: int) -> None:
        """The head reached ``epoch``: drop its journals, and expire old generations."""
        assert self.layout is not None
        self.catalog.forget_journals(self.layout.shards, epoch)
        if epoch % self.layout.gen_epochs == 0:
            deleted = self.catalog.expire_before(self.layout, epoch)
            if deleted:
                log.info("catalog: expired %d keys older than the retention window", deleted)
