"""Redis streams, read with raw RESP (:mod:`.resp`) and written with plain ``XADD``.

- :func:`read`: every entry of the stream (``XRANGE`` page by page), counted per key field;
- :func:`last_epoch`: the epoch field of the last entry (``XREVRANGE ... COUNT 1``);
- :class:`Watch`: a keyspace notification on the stream (``notify-keyspace-events`` given
  ``K`` and ``t``; a Lua script's ``XADD`` notifies once the script has run, so it says "a
  commit became visible"); where ``CONFIG SET`` is refused, ``XLEN`` polled every 5 ms;
- :func:`write_partition`: the control's ``XADD`` of each record (key fields and epoch),
  pipelined without ``MULTI``.
"""

from __future__ import annotations

import contextlib
import select
import time
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any
from urllib.parse import urlsplit

from exactlyonce.integration.lab.chaos.control.reading import Reading
from exactlyonce.integration.lab.chaos.control.resp import RespClient, RespError, entry_fields
from exactlyonce.integration.lab.chaos.control.target import Key, Target

READER = "raw RESP XRANGE (no Redis client library)"
COMMIT_REQUEST = b"XADD"  # the control's pipelined XADDs
PAGE = 10_000
POLL_S = 0.005


def read(t: Target) -> Reading:
    found: Counter[Key] = Counter()
    nulls = 0
    names = [k.encode() for k in t.keys]
    with RespClient(t.address) as client:
        start = b"-"
        while True:
            page = client.call("XRANGE", t.name, start, "+", "COUNT", PAGE) or []
            for entry_id, raw in page:
                fields = entry_fields(raw)
                values = [fields.get(n) for n in names]
                if any(v is None for v in values):
                    nulls += 1
                else:
                    found[tuple(v.decode() for v in values if v is not None)] += 1
                start = b"(" + entry_id
            if len(page) < PAGE:
                break
    return Reading(READER, t.describe(), found, nulls)


def last_epoch(t: Target) -> int | None:
    with RespClient(t.address, timeout=5) as client:
        last = client.call("XREVRANGE", t.name, "+", "-", "COUNT", 1) or []
    if not last:
        return None
    value = entry_fields(last[0][1]).get(t.epoch.encode())
    return None if value is None else int(value)


class Watch:
    """An ``XADD`` to the stream, seen through a keyspace notification (or ``XLEN``)."""

    def __init__(self, t: Target) -> None:
        self.t = t
        self.client = RespClient(t.address, timeout=5)
        self.listener: RespClient | None = None
        self.length = int(self.client.call("XLEN", t.name))
        try:
            flags = self.client.call("CONFIG", "GET", "notify-keyspace-events")[1].decode()
            if not ({"K", "t"} <= set(flags) or ("K" in flags and "A" in flags)):
                self.client.call("CONFIG", "SET", "notify-keyspace-events", flags + "Kt")
        except RespError:  # CONFIG refused (a managed Redis): poll XLEN instead
            return
        db = urlsplit(t.address).path.strip("/") or "0"
        self.listener = RespClient(t.address, timeout=5)
        self.listener.call("SUBSCRIBE", f"__keyspace@{db}__:{t.name}")

    def seen(self, timeout: float, alive: Callable[[], bool]) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and alive():
            if self.listener is None:
                if int(self.client.call("XLEN", self.t.name)) > self.length:
                    return True
                time.sleep(POLL_S)
                continue
            if not self.listener.buf and not select.select([self.listener.sock], [], [], 0.1)[0]:
                continue
            message = self.listener.reply()
            if message and message[0] == b"message" and message[2] == b"xadd":
                return True
        return False

    def close(self) -> None:
        self.client.close()
        if self.listener is not None:
            with contextlib.suppress(OSError):
                self.listener.close()


def prepare(t: Target) -> None:
    """Nothing: the first XADD makes the stream."""


def write_partition(
    t: Target, epoch: int, rows: Sequence[tuple[Any, ...]], mid: Callable[[], None]
) -> None:
    """XADD each record (its key fields, the epoch), pipelined, in two halves."""
    import redis

    client: Any = redis.Redis.from_url(t.address)
    half = len(rows) // 2
    try:
        for n, part in enumerate((rows[:half], rows[half:])):
            if n:
                mid()
            pipe = client.pipeline(transaction=False)
            for row in part:
                fields = {k: v for k, v in zip(t.keys, row, strict=True) if v is not None}
                pipe.xadd(t.name, {**fields, t.epoch: epoch})
            pipe.execute()
    finally:
        client.close()
