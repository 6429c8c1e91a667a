"""The drainer's Redis target: a share's records and its offsets in ONE Lua script (ATOMIC).

Where the offsets live: a hash per (query, sink, topic) in the sink's Redis,
``<prefix>:drain-offsets:<topic>`` (the sink's ``prefix`` names the query and the sink),
field = partition, value = the next offset to drain.

One script per share (``scripts/drain.lua``, with the RedisSink's ``records.lua`` in front:
the records are applied exactly as the sink's tasks apply them, ``hash``, ``string`` or
``stream``, keys from the sink's ``key_template``, ``ttl_seconds`` honoured), atomically on the
server: it compares the stored offsets of the writer's partitions with the ones the drainer
holds (another drainer, or this one's commit whose reply was lost, moved them:
``EO_OFFSETS_MOVED``, nothing written), writes the new offsets, then every record. Redis runs
a script whole or not at all, so a stream's ``XADD`` is never repeated and never lost, even
though an append is not idempotent.

Dead letters: records the drainer cannot make a row of (not a JSON object, a null key-template
column) go to the drain dead-letter topic before the script; records Redis refuses while the
script applies them (``WRONGTYPE``: the key holds another type), and records whose key lies in
the sink's control namespace (its offsets, head, catalog: DESIGN invariant 14), go, as in the
RedisSink, to the sink's dead-letter stream ``<prefix>:dead-letters``, in the same atomic step.

The ``drain_mid_write`` crash point sits between sending the script and reading its reply (the
script then runs whole; the drainer's restart finds the offsets moved): the lost reply.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, TypeVar

import redis

from exactlyonce.connectors.base.drain import Counts, Ownership, Share, TargetClassDefaults, owned
from exactlyonce.connectors.base.guarantee import Guarantee
from exactlyonce.connectors.redis import RedisSink, connect, patient
from exactlyonce.connectors.redis.connection import reaching, require_standalone
from exactlyonce.connectors.redis.drain_fast import fast_share
from exactlyonce.connectors.redis.drain_records import exact_share
from exactlyonce.connectors.redis.lua import with_records
from exactlyonce.errors import OffsetsMovedError
from exactlyonce.faults import armed, crash_point

T = TypeVar("T")


def _load_script() -> str:
    from importlib.resources import files

    return files(__package__).joinpath("scripts").joinpath("drain.lua").read_text(encoding="utf-8")


DRAIN_SCRIPT = with_records(_load_script())


class RedisDrainTarget(TargetClassDefaults):
    """Writes drained records into a :class:`RedisSink`'s keys: a
    :class:`~exactlyonce.connectors.base.drain.DrainTarget`.

    Guarantee: ATOMIC. Each share's records and the offsets of the partitions this writer owns
    are applied by one Lua script, after a compare-and-set of the stored offsets; a crash (or a
    lost reply) leaves both or neither. See :mod:`exactlyonce.connectors.redis.drain`.
    """

    @staticmethod
    def guarantee(sink: RedisSink) -> Guarantee:
        return Guarantee(
            "EXACTLY ONCE, ATOMIC",
            "one Lua script per share compares the stored offsets, stores the new ones and "
            "applies the records as the sink's own tasks do.",
        )

    def __init__(
        self,
        sink: RedisSink,
        topic: str,
        application_name: str = "",
        writer: int = 0,
        writers: int = 1,
        member: tuple[int, int] = (0, 1),
    ) -> None:
        self.sink = sink
        self.topic = topic
        self.offsets_key = f"{sink.prefix}:drain-offsets:{topic}"
        self.application_name = application_name
        self._ownership = Ownership(writer, writers, *member)
        self.held: dict[int, int] = {}
        self._client: Any = None
        self._sha: str | None = None

    @property
    def where(self) -> str:
        return f"Redis at {self.sink.where} ({self.sink.sink_name})"

    def owns(self, partition: int) -> bool:
        return self._ownership.owns(partition)

    # -- connection ----------------------------------------------------------------------

    def _redis(self) -> Any:
        if self._client is None:
            self._client = connect(
                self.sink.url,
                retries=self.sink.retries,
                socket_timeout=self.sink.socket_timeout,
                connect_timeout=self.sink.connect_timeout,
            )
            self._sha = None
        return self._client

    def _call(self, fn: Callable[[Any], T]) -> T:
        """``fn(client)``, waiting out BUSY; connection failures as SinkUnavailableError."""
        with reaching(self.sink.url, self.sink.where):
            return patient(lambda: fn(self._redis()), self.sink.busy)

    def close(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            client.close()

    # -- offsets -------------------------------------------------------------------------

    def ensure(self) -> None:
        """Reachable, a standalone primary, and the offsets key a hash (or absent)."""
        self._call(lambda r: require_standalone(r, self.offsets_key))

    def read_offsets(self) -> dict[int, int]:
        raw = self._call(lambda r: r.hgetall(self.offsets_key))
        stored = {int(p): int(o) for p, o in raw.items()}
        self.held = owned(self, stored)
        return stored

    def reset_offsets(self) -> int:
        def reset(r: Any) -> int:
            n = int(r.hlen(self.offsets_key))
            r.delete(self.offsets_key)
            return n

        n = self._call(reset)
        self.held = {}
        return n

    # -- one share -----------------------------------------------------------------------

    def write_share(self, share: Share) -> Counts:
        """Dead letters out first, then one script: offsets compared and moved, records
        applied. Returns (written, 0, dead letters): Redis dedups nothing, and needs not: a
        share is applied once."""
        encoded = fast_share(self.sink, share.chunk, share.where)
        if encoded is None:
            encoded = exact_share(self.sink, share.chunk, share.where)
        letters = share.bad + encoded.letters
        if letters:
            share.dead_letter(letters)
        new = owned(self, share.offsets)
        written, failed = self._run(share.n, self._args(new, encoded.fields, encoded.chunks))
        self.held = new
        return written, 0, len(letters) + failed

    def _args(self, new: dict[int, int], fields: list[str], chunks: list[bytes]) -> list[Any]:
        o = self._ownership
        ownership = {"member": o.member, "members": o.members, "writer": o.writer}
        config: dict[str, Any] = {
            "mode": self.sink.write,
            "ttl": self.sink.ttl_ms or 0,
            "fields": fields,
            "idf": self.sink.id_field,
            "ef": self.sink.epoch_field,
            "query": self.sink.query_name,
            "sink": self.sink.sink_name,
            "guarded": list(self.sink.config.guarded_namespaces),
        }
        return [
            json.dumps({**ownership, "writers": o.writers}),
            json.dumps({str(p): str(v) for p, v in self.held.items()}),
            json.dumps({str(p): str(v) for p, v in new.items()}),
            json.dumps(config),
            *chunks,
        ]

    def _keys(self) -> list[str]:
        return [self.offsets_key, self.sink.dead_letter_key, self.sink.stream_registry_key]

    def _run(self, n: int, args: list[Any]) -> tuple[int, int]:
        """The script, by its SHA (loaded once per connection, again after a Redis restart
        forgot it). With ``drain_mid_write`` armed, sent and its reply read apart, the crash
        point between. ``EO_OFFSETS_MOVED`` is an :class:`OffsetsMovedError`."""
        keys = self._keys()

        def once(r: Any) -> list[Any]:
            if self._sha is None:
                self._sha = r.script_load(DRAIN_SCRIPT)
            if armed("drain_mid_write"):
                return _sent_then_read(r, self._sha, keys, args, n)
            return list(r.evalsha(self._sha, len(keys), *keys, *args))

        def run(r: Any) -> list[Any]:
            try:
                try:
                    return once(r)
                except redis.exceptions.NoScriptError:  # not run: a restart emptied the cache
                    self._sha = None
                    return once(r)
            except redis.ResponseError as exc:
                if str(exc).startswith("EO_OFFSETS_MOVED"):
                    raise OffsetsMovedError(f"{self.where}: {exc}") from None
                raise

        written, failed = self._call(run)
        return int(written), int(failed)


def _sent_then_read(r: Any, sha: str, keys: list[str], args: list[Any], n: int) -> list[Any]:
    """EVALSHA sent, the ``drain_mid_write`` crash point, then the reply read."""
    conn = r.connection_pool.get_connection("EVALSHA")
    try:
        conn.send_command("EVALSHA", sha, len(keys), *keys, *args)
        crash_point("drain_mid_write", n)
        reply = conn.read_response()
    finally:
        r.connection_pool.release(conn)
    if isinstance(reply, redis.ResponseError):
        raise reply
    return list(reply)


__all__ = ["DRAIN_SCRIPT", "RedisDrainTarget"]
