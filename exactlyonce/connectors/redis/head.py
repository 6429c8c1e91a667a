"""The Redis sink's :class:`~exactlyonce.connectors.base.head.HeadStore`: a hash at
``<prefix>:head``, shard markers at ``<prefix>:done:<epoch>`` (listed in
``<prefix>:done-epochs``); create and advance are one Lua script each."""

from __future__ import annotations

import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any, TypeVar

from exactlyonce.connectors.base.head import Head
from exactlyonce.connectors.redis import lua

T = TypeVar("T")


def head_key(prefix: str) -> str:
    """The hash holding the head of the sink whose keys start with ``prefix``."""
    return f"{prefix}:head"


class RedisHeadStore:
    """The head under ``prefix``. ``client()`` is the sink's connection; ``reaching()``
    turns connection failures into SinkUnavailableError (never with the password);
    ``patient(call)`` waits out BUSY."""

    def __init__(
        self,
        prefix: str,
        client: Callable[[], Any],
        reaching: Callable[[], AbstractContextManager[None]],
        patient: Callable[[Callable[[], Any]], Any],
    ) -> None:
        self.prefix = prefix
        self.key = head_key(prefix)
        self.client, self.reaching, self.patient = client, reaching, patient

    def done_key(self, epoch: int | str) -> str:
        return f"{self.prefix}:done:{epoch}"

    def read_head(self) -> Head | None:
        with self.reaching():
            raw = self.patient(lambda: self.client().hgetall(self.key))
        if not raw:
            return None
        got = {k.decode(): v.decode() for k, v in raw.items()}
        advanced_at = float(got["updated_at"]) if got.get("updated_at") else None
        return Head(
            int(got["epoch"]),
            got.get("spark_query_id") or None,
            int(got["num_shards"]),
            advanced_at,
        )

    def create_head(self, head: Head) -> None:
        with self.reaching():
            script = self.client().register_script(lua.CREATE_HEAD)
            args = [head.epoch, head.num_shards, head.spark_query_id or "", time.time()]
            self.patient(lambda: script(keys=[self.key], args=args))

    def bind_query_id(self, spark_query_id: str) -> None:
        with self.reaching():
            self.patient(lambda: self.client().hsetnx(self.key, "spark_query_id", spark_query_id))

    def advance_head(self, epoch: int, spark_query_id: str | None) -> None:
        """One script: the head moves to ``epoch``; shard markers at or below it go."""
        script = self.client().register_script(lua.ADVANCE)
        keys = [self.key, f"{self.prefix}:done-epochs", f"{self.prefix}:stages"]
        args = [epoch, spark_query_id or "", time.time(), f"{self.prefix}:done:"]
        with self.reaching():
            self.patient(lambda: script(keys=keys, args=args))

    def reset_head(self) -> None:
        """The head, every shard marker and every staged write of (query, sink) go."""
        with self.reaching():
            r = self.client()
            epochs = [e.decode() for e in r.smembers(f"{self.prefix}:done-epochs")]
            stages = list(r.smembers(f"{self.prefix}:stages"))
            r.delete(self.key, f"{self.prefix}:done-epochs", f"{self.prefix}:stages")
            leftovers = [*map(self.done_key, epochs), *stages]
            if leftovers:
                r.delete(*leftovers)
