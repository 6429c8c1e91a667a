"""The catalog's three Lua scripts, read once from the ``*.lua`` files beside this module.

Each file is the exact text Redis runs (redis-py registers it by its SHA1), so a file starts
with the blank line the scripts always had; comments about them live here, not in the Lua.
Every script that takes ``KEYS[1]`` (the catalog's meta hash) first checks its ``instance``
against ``ARGV[1]`` and answers ``CATALOG_LOST`` on a mismatch: a Redis that restarted empty
is never read as "nothing seen yet".

- :data:`LUA_MARK` (``mark.lua``): ``ARGV = instance, bucket prefix, blob, groups``. Appends
  each group's IDs to its bucket; returns 1. ``groups`` packs three little-endian uint32 per
  group: bucket, first and end index into the blob of IDs sorted by bucket. One packed
  argument instead of three per bucket: redis-py encodes every argument in Python, which cost
  more than the script (47 ms per 10k IDs).
- :data:`LUA_LOOKUP` (``lookup.lua``): same arguments; returns ``'1'`` or ``'0'`` per ID of the
  blob, in the blob's order. A bucket is a string of 16-byte IDs, so a match counts only at a
  multiple of 16 (the ``holds`` helper at the top of the file).
- :data:`LUA_UNMARK` (``unmark.lua``): ``ARGV = bucket prefix, blob, bucket bits``, no keys and
  no instance check (the driver's rollback). Removes the blob's IDs from their buckets, the
  bucket computed from each ID's first two bytes; returns the number removed.

The Python twins in :mod:`exactlyonce.testing.memory_scripts` are keyed by these constants.
"""

from __future__ import annotations

from importlib.resources import files

__all__ = ["LUA_LOOKUP", "LUA_MARK", "LUA_UNMARK", "load"]


def load(name: str) -> str:
    """The text of ``<name>.lua`` shipped in this package (package data, also in a wheel)."""
    return files(__name__).joinpath(f"{name}.lua").read_text(encoding="utf-8")


LUA_MARK = load("mark")
LUA_LOOKUP = load("lookup")
LUA_UNMARK = load("unmark")
