"""``exactlyonce rewind`` on a Redis sink: stream entries and dead letters of the epochs above
N go (``XDEL``), then the head moves back to N (``scripts/rewind.lua``).

Only ``write="stream"`` keeps each record's epoch next to it (the entry's ``epoch_field``),
and an entry is only ever appended: deleting the entries above N leaves the streams as they
were when the head was N. Refused:

- ``write="hash"``/``"string"``: a key keeps no epoch (the value is the record's columns or
  JSON), and a record written above N may have replaced the value an earlier epoch left under
  the same key; removing the key would lose that value, keeping it would keep the newer one;
- ``mode="upsert"``: the same, and the epochs a key keeps are the latest write's only.

Not atomic across streams (one ``XDEL`` page at a time, then the head): a rewind cut short
leaves the head where it was, and running it again finishes it. Exact while the streams are
neither trimmed nor expired (``ttl_seconds``), like the sink's catalog rebuild.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from exactlyonce.connectors.base.rewind import Removal
from exactlyonce.connectors.redis import lua
from exactlyonce.faults import crash_point

if TYPE_CHECKING:
    from exactlyonce.connectors.redis.parts import RedisParts

PAGE = 10_000

KEYED_REFUSAL = (
    "write={write!r} keeps no epoch per key (the value is the record's columns), and a key "
    "written above epoch N may have replaced the value an earlier epoch wrote to it: removing "
    "it would lose that value, keeping it would keep the newer one. Only write='stream' "
    "(every entry carries its epoch) can be rewound"
)
UPSERT_REFUSAL = (
    "mode='upsert' replaces a key's value in place: removing what was written above epoch N "
    "cannot bring back the values of epochs at or below N"
)


def refusal(sink: RedisParts) -> str | None:
    if sink.upsert is not None:
        return UPSERT_REFUSAL
    if sink.write != "stream":
        return KEYED_REFUSAL.format(write=sink.write)
    return None


def _entries_above(
    sink: RedisParts, key: str, field: str, epoch: int, found: Callable[[bytes, int], None]
) -> None:
    """Call ``found(entry id, its epoch)`` for every entry of stream ``key`` above ``epoch``."""
    r, name = sink.client, field.encode()
    start: bytes | str = "-"
    while True:
        entries: list[Any] = sink.patient(
            lambda s=start: r.xrange(key, min=s, max="+", count=PAGE)  # type: ignore[misc]
        )
        for entry_id, fields in entries:
            raw = fields.get(name)
            if raw is not None and int(raw) > epoch:
                found(entry_id, int(raw))
        if len(entries) < PAGE:
            return
        start = b"(" + entries[-1][0]


def _streams(sink: RedisParts) -> list[tuple[str, str, str]]:
    """(what, stream key, epoch field) of every stream the sink appended to, and its
    dead-letter stream (whose entries carry ``epoch``)."""
    r = sink.client
    keys = sink.patient(lambda: sorted(k.decode() for k in r.smembers(sink.stream_registry_key)))
    found = [(f"entries of stream {k}", k, sink.epoch_field) for k in keys]
    return [*found, ("dead letters", sink.dead_letter_key, "epoch")]


def _scan(sink: RedisParts, epoch: int, delete: bool) -> list[Removal]:
    out = []
    with sink.reaching():
        for what, key, field in _streams(sink):
            counts: dict[int, int] = {}
            doomed: list[bytes] = []

            def found(
                entry_id: bytes, at: int, c: dict[int, int] = counts, d: list[bytes] = doomed
            ) -> None:
                c[at] = c.get(at, 0) + 1
                d.append(entry_id)

            _entries_above(sink, key, field, epoch, found)
            if delete:
                for i in range(0, len(doomed), PAGE):
                    page = doomed[i : i + PAGE]
                    sink.patient(
                        lambda p=page, k=key: sink.client.xdel(k, *p)  # type: ignore[misc]
                    )
                crash_point("rewind_mid_delete", epoch)
            out.append(Removal(what, counts))
        out.append(Removal("shard commits", _marker_counts(sink, epoch)))
    return out


def _marker_counts(sink: RedisParts, epoch: int) -> dict[int, int]:
    return {e: len(shards) for e, shards in shard_commits(sink).items() if e > epoch}


def removals_above(sink: RedisParts, epoch: int) -> list[Removal]:
    return _scan(sink, epoch, delete=False)


def rewind_to(sink: RedisParts, epoch: int) -> list[Removal]:
    """Entries above ``epoch`` go (XDEL, page by page), then the head moves back with its
    shard markers and staging (one script). Idempotent."""
    removed = _scan(sink, epoch, delete=True)
    script = sink.client.register_script(lua.REWIND)
    keys = [sink.head_key, f"{sink.prefix}:done-epochs", f"{sink.prefix}:stages"]
    args = [epoch, time.time(), f"{sink.prefix}:done:"]
    with sink.reaching():
        sink.patient(lambda: script(keys=keys, args=args))
    return removed


def shard_commits(sink: RedisParts) -> dict[int, list[int]]:
    """Epoch -> shards of the markers still held (``<prefix>:done:<epoch>``, a hash of shard
    -> attempt token, besides the attempts' ``w:<token>`` counts)."""
    r: Any = sink.client
    out: dict[int, list[int]] = {}
    with sink.reaching():
        epochs = sink.patient(lambda: r.smembers(f"{sink.prefix}:done-epochs"))
        for raw in sorted(epochs, key=int):
            fields: list[bytes] = sink.patient(
                lambda e=raw: r.hkeys(f"{sink.prefix}:done:{e.decode()}")  # type: ignore[misc]
            )
            shards = sorted(int(f) for f in fields if not f.startswith(b"w:"))
            out[int(raw)] = shards
    return out
