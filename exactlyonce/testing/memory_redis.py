"""An in-memory stand-in for the few Redis commands the dedup catalog uses.

The catalog (:mod:`exactlyonce.dedup.catalog`) reaches Redis through one seam,
``DedupConfig.connect``. :class:`MemoryRedis` is a server held in this process;
:meth:`MemoryRedis.connect` is that seam's callable, so the real catalog code, the keeper and
every task's :class:`~exactlyonce.dedup.shard.TaskDedup` run unchanged against it::

    server = MemoryRedis()
    config = server.dedup_config(expected_ids=1000)   # DedupConfig(connect=server.connect)

It keeps redis-py's conventions: values come back as ``bytes``, a failed script raises
``redis.ResponseError``, a MULTI pipeline runs its commands as one step. The catalog's four
Lua scripts are run by their Python twins in :mod:`.memory_scripts`. Anything else the
catalog does not use is not there (an ``AttributeError`` says so).

Not a Redis: no expiry, no persistence options, no cluster; one lock serialises every
command. :meth:`MemoryRedis.flushall` stands for a Redis that restarted empty.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Iterator
from typing import Any

from exactlyonce.dedup.catalog import DedupConfig
from exactlyonce.testing.memory_scripts import SCRIPTS, Data, memory_usage, wrong_type

Value = bytes | dict[bytes, bytes]


def encode(value: Any) -> bytes:
    """What redis-py sends for an argument: bytes as they are, str as UTF-8, numbers as text."""
    if isinstance(value, bytes):
        return value
    if isinstance(value, (bytearray, memoryview)):
        return bytes(value)
    if isinstance(value, str):
        return value.encode()
    if isinstance(value, (int, float)):
        return repr(value).encode()
    raise TypeError(f"cannot send {type(value).__name__} to Redis")


def glob_regex(pattern: bytes) -> re.Pattern[bytes]:
    """A Redis glob (``*``, ``?``, ``[...]``, backslash escapes) as a regular expression."""
    out, i = [], 0
    while i < len(pattern):
        c = pattern[i : i + 1]
        if c == b"\\" and i + 1 < len(pattern):
            out.append(re.escape(pattern[i + 1 : i + 2]))
            i += 1
        elif c == b"*":
            out.append(b".*")
        elif c == b"?":
            out.append(b".")
        elif c == b"[":
            end = pattern.find(b"]", i + 1)
            if end < 0:
                out.append(re.escape(c))
            else:
                out.append(b"[" + pattern[i + 1 : end].replace(b"^", b"\\^") + b"]")
                i = end
        else:
            out.append(re.escape(c))
        i += 1
    return re.compile(b"".join(out) + b"\\Z", re.DOTALL)


class MemoryRedis:
    """The server: a dict of keys, shared by every client it hands out. In-process only."""

    def __init__(self) -> None:
        self.data: Data = {}
        self.lock = threading.RLock()
        self.commands = 0  # every command a client ran, scripts and pipelines included

    def connect(self, url: str = "redis://memory") -> MemoryRedisClient:
        """``DedupConfig.connect``: a client of this server (``url`` is ignored)."""
        return MemoryRedisClient(self)

    def dedup_config(self, **options: Any) -> DedupConfig:
        """A :class:`DedupConfig` whose catalog lives in this server."""
        return DedupConfig("redis://memory", connect=self.connect, **options)

    def flushall(self) -> None:
        """Forget every key: what a Redis without persistence does when it restarts."""
        with self.lock:
            self.data.clear()

    def __reduce__(self) -> Any:
        raise TypeError(
            "MemoryRedis lives in one process and cannot be shipped to Spark executors; "
            "run the tasks in-process (see exactlyonce.testing)"
        )


class MemoryRedisClient:
    """The redis-py ``Redis`` methods the catalog calls, with the same replies."""

    def __init__(self, server: MemoryRedis) -> None:
        self.server = server

    def _run(self, fn: Callable[[], Any]) -> Any:
        with self.server.lock:
            self.server.commands += 1
            return fn()

    def _string(self, key: Any) -> bytes | None:
        value = self.server.data.get(encode(key))
        if isinstance(value, dict):
            raise wrong_type()
        return value

    def _hash(self, key: Any) -> dict[bytes, bytes]:
        value = self.server.data.get(encode(key), {})
        if not isinstance(value, dict):
            raise wrong_type()
        return value

    # -- connection --------------------------------------------------------------------

    def ping(self) -> bool:
        return True

    def close(self) -> None:
        return None

    # -- strings -----------------------------------------------------------------------

    def get(self, key: Any) -> bytes | None:
        return self._run(lambda: self._string(key))  # type: ignore[no-any-return]

    def set(self, key: Any, value: Any) -> bool:
        def run() -> bool:
            self.server.data[encode(key)] = encode(value)
            return True

        return self._run(run)  # type: ignore[no-any-return]

    def append(self, key: Any, value: Any) -> int:
        def run() -> int:
            new = (self._string(key) or b"") + encode(value)
            self.server.data[encode(key)] = new
            return len(new)

        return self._run(run)  # type: ignore[no-any-return]

    def strlen(self, key: Any) -> int:
        return self._run(lambda: len(self._string(key) or b""))  # type: ignore[no-any-return]

    def incr(self, key: Any) -> int:
        def run() -> int:
            new = int(self._string(key) or b"0") + 1
            self.server.data[encode(key)] = str(new).encode()
            return new

        return self._run(run)  # type: ignore[no-any-return]

    def bitop(self, operation: str, dest: Any, *keys: Any) -> int:
        """Only OR, the one the Bloom filters use; shorter strings count as zero-padded."""
        if operation.upper() != "OR":
            raise NotImplementedError(f"BITOP {operation}")

        def run() -> int:
            values = [self._string(k) or b"" for k in keys]
            size = max((len(v) for v in values), default=0)
            out = 0
            for v in values:
                out |= int.from_bytes(v.ljust(size, b"\0"), "big")
            self.server.data[encode(dest)] = out.to_bytes(size, "big")
            return size

        return self._run(run)  # type: ignore[no-any-return]

    # -- hashes ------------------------------------------------------------------------

    def hget(self, key: Any, field: Any) -> bytes | None:
        return self._run(lambda: self._hash(key).get(encode(field)))  # type: ignore[no-any-return]

    def hgetall(self, key: Any) -> dict[bytes, bytes]:
        return self._run(lambda: dict(self._hash(key)))  # type: ignore[no-any-return]

    def hkeys(self, key: Any) -> list[bytes]:
        return self._run(lambda: list(self._hash(key)))  # type: ignore[no-any-return]

    def hdel(self, key: Any, *fields: Any) -> int:
        def run() -> int:
            current = self._hash(key)
            return sum(current.pop(encode(f), None) is not None for f in fields)

        return self._run(run)  # type: ignore[no-any-return]

    def hset(self, key: Any, mapping: dict[Any, Any]) -> int:
        def run() -> int:
            current = self._hash(key)
            added = sum(1 for f in mapping if encode(f) not in current)
            current.update({encode(f): encode(v) for f, v in mapping.items()})
            self.server.data[encode(key)] = current
            return added

        return self._run(run)  # type: ignore[no-any-return]

    # -- keys --------------------------------------------------------------------------

    def delete(self, *keys: Any) -> int:
        def run() -> int:
            return sum(self.server.data.pop(encode(k), None) is not None for k in keys)

        return self._run(run)  # type: ignore[no-any-return]

    unlink = delete

    def exists(self, *keys: Any) -> int:
        return self._run(lambda: sum(encode(k) in self.server.data for k in keys))  # type: ignore[no-any-return]

    def rename(self, key: Any, new: Any) -> bool:
        def run() -> bool:
            if encode(key) not in self.server.data:
                import redis

                raise redis.ResponseError("ERR no such key")
            self.server.data[encode(new)] = self.server.data.pop(encode(key))
            return True

        return self._run(run)  # type: ignore[no-any-return]

    def keys(self, pattern: Any = "*") -> list[bytes]:
        regex = glob_regex(encode(pattern))
        return self._run(lambda: [k for k in self.server.data if regex.match(k)])  # type: ignore[no-any-return]

    def scan_iter(self, match: Any = "*", count: int | None = None) -> Iterator[bytes]:
        """A snapshot of the matching keys (Redis's SCAN may repeat keys; this does not)."""
        return iter(self.keys(match))

    def hscan_iter(
        self, key: Any, match: Any = "*", count: int | None = None
    ) -> Iterator[tuple[bytes, bytes]]:
        """A snapshot of the hash's matching (field, value) pairs, as redis-py yields them."""
        regex = glob_regex(encode(match))
        return iter([(f, v) for f, v in self._hash(key).items() if regex.match(f)])

    def memory_usage(self, key: Any) -> int | None:
        """An estimate: the value's bytes plus a fixed overhead per key (what the script
        twins count, see :func:`~.memory_scripts.memory_usage`)."""
        return self._run(lambda: memory_usage(self.server.data, encode(key)))  # type: ignore[no-any-return]

    # -- scripts and transactions ------------------------------------------------------

    def register_script(self, source: str) -> Callable[..., Any]:
        """One of the catalog's scripts, run by its Python twin; any other is refused."""
        twin = SCRIPTS.get(source)
        if twin is None:
            raise NotImplementedError("MemoryRedis runs only the catalog's own Lua scripts")

        def call(keys: Any = (), args: Any = ()) -> Any:
            return self._run(
                lambda: twin(self.server.data, [encode(k) for k in keys], [encode(a) for a in args])
            )

        return call

    def pipeline(self, transaction: bool = True) -> MemoryPipeline:
        return MemoryPipeline(self)


class MemoryPipeline:
    """Commands queued and run together, under the server's lock (MULTI/EXEC)."""

    def __init__(self, client: MemoryRedisClient) -> None:
        self.client = client
        self.queued: list[Callable[[], Any]] = []

    def __getattr__(self, name: str) -> Callable[..., MemoryPipeline]:
        command = getattr(self.client, name)

        def queue(*args: Any, **kwargs: Any) -> MemoryPipeline:
            self.queued.append(lambda: command(*args, **kwargs))
            return self

        return queue

    def execute(self) -> list[Any]:
        with self.client.server.lock:
            try:
                return [command() for command in self.queued]
            finally:
                self.queued = []
