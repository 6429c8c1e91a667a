"""Catalog tests' shared makings: random record IDs, and a small catalog config on real
Redis or on the scripts' Python twins (:class:`~exactlyonce.testing.MemoryRedis`)."""

from __future__ import annotations

import os

import numpy as np

from exactlyonce.dedup.config import DedupConfig
from exactlyonce.testing import MemoryRedis

CATALOG_BACKENDS = ["redis", "memory"]


def random_ids(n: int) -> np.ndarray:
    """``n`` random 16-byte record IDs, one per row."""
    return np.frombuffer(os.urandom(16 * n), dtype=np.uint8).reshape(n, 16)


def small_catalog_config(backend: str, services: dict[str, str]) -> DedupConfig:
    """20,000 expected IDs over 8 epochs, on ``backend`` (of :data:`CATALOG_BACKENDS`)."""
    if backend == "memory":
        return MemoryRedis().dedup_config(expected_ids=20_000, retention_epochs=8)
    return DedupConfig(services["EXACTLYONCE_REDIS_URL"], expected_ids=20_000, retention_epochs=8)
