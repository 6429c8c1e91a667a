"""Checks the sinks share on their settings, each naming the field it refuses."""

from __future__ import annotations

import os
from collections.abc import Sequence

from exactlyonce.dedup.catalog import DedupConfig
from exactlyonce.errors import ConfigError


def resolve_dedup(dedup: bool | DedupConfig, redis_url: str | None) -> DedupConfig | None:
    """Dedup is on by default; it needs the catalog's Redis (argument or environment)."""
    if isinstance(dedup, DedupConfig):
        return dedup
    if dedup is False:
        return None
    if dedup is not True:
        raise ConfigError("dedup", f"must be True, False or a DedupConfig, got {dedup!r}")
    url = redis_url or os.environ.get("EXACTLYONCE_REDIS_URL")
    if not url:
        raise ConfigError(
            "redis_url",
            "dedup is on by default and needs the catalog's Redis: pass redis_url=... or set "
            "EXACTLYONCE_REDIS_URL, or turn dedup off with dedup=False",
        )
    return DedupConfig(redis_url=url)


def require_text(field: str, value: object, message: str) -> None:
    """Refuse anything but a string holding more than white space."""
    if not isinstance(value, str) or not value.strip():
        raise ConfigError(field, message)


def require_one_of(field: str, value: object, choices: Sequence[str]) -> None:
    """Refuse a value that is not one of ``choices``."""
    if value not in choices:
        raise ConfigError(field, f"must be one of {list(choices)}, got {value!r}")


def require_distinct(field: str, value: str, other_field: str, other: str) -> None:
    """Refuse a column name equal to another one the sink writes."""
    if value == other:
        raise ConfigError(field, f"must differ from {other_field}")


def check_shards(shards: int | None) -> None:
    """Refuse a shard count that is not an integer from 1 to 4096."""
    if shards is not None and (not isinstance(shards, int) or not 1 <= shards <= 4096):
        raise ConfigError("shards", f"must be an integer from 1 to 4096, got {shards!r}")
