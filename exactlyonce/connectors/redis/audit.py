"""The Redis sink's audit, per ``write`` mode (the stored layout is :mod:`the sink's
<exactlyonce.connectors.redis>`).

- ``stream``: every entry of every stream the sink appended to (its ``<prefix>:streams``
  registry, and the streams matching the key template), read with XRANGE page by page and
  counted per record ID (the entry's ``id_field``): an ID in two entries is a duplicate, an
  entry without the field cannot be attributed and fails the audit.
- ``hash`` and ``string``: the value stores no record ID, the key is the record's identity, so
  each expected record's key is rendered from its key values (the key template must name only
  ``id_columns``) and checked to exist; every other key matching the template (SCAN) is
  unexpected, named by its key.

Dead letters: the entries of the sink's dead-letter stream (``<prefix>:dead-letters``, one
per query and sink). Read-only."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from typing import Any

from exactlyonce.connectors.base.audit import SinkAudit
from exactlyonce.connectors.base.expected import Expected, spark_text
from exactlyonce.connectors.redis import RedisSink
from exactlyonce.connectors.redis.connection import connect, reaching
from exactlyonce.connectors.redis.template import KeyTemplate
from exactlyonce.errors import ConfigError
from exactlyonce.progress import Progress
from exactlyonce.secrets import Secret, redact_dsn

PAGE = 10_000
_GLOB_SPECIAL = "*?[]\\"


def read_redis(sink: RedisSink, expected: Expected) -> SinkAudit:
    """Entries (stream) or keys (hash, string) per record ID, the dead letters and head."""
    url = Secret(sink.config.url.get_secret_value())
    client = connect(
        url, retries=sink.retries, socket_timeout=sink.socket_timeout,
        connect_timeout=sink.connect_timeout,
    )  # fmt: skip
    unattributable = 0
    with reaching(url, redact_dsn(url.reveal())):
        if sink.write == "stream":
            counts, unattributable = _stream_ids(client, sink, len(expected))
            unit = "entries read"
        else:
            counts = _keys_found(client, sink, expected)
            unit = "keys found"
        dead = int(client.xlen(sink.dead_letter_key))
    head = sink.peek_head()
    return SinkAudit(
        query_name=sink.query_name,
        sink=sink.sink_name,
        kind="redis",
        read_with=f"{sink.write} writes",
        unit=unit,
        expected=expected,
        counts=counts,
        unattributable=unattributable,
        head_epoch=head.epoch if head else None,
        dead_letters=dead,
    )


def key_pattern(template: KeyTemplate) -> str:
    """A SCAN pattern of every key the template renders: each field as ``*``."""
    out = []
    for literal, name, _, _ in template.parts:
        out.append("".join("\\" + c if c in _GLOB_SPECIAL else c for c in literal))
        if name is not None:
            out.append("*")
    return "".join(out)


def _stream_keys(client: Any, sink: RedisSink) -> list[bytes]:
    listed = set(client.smembers(sink.stream_registry_key))
    listed |= set(client.scan_iter(match=key_pattern(sink.template), count=1000, _type="stream"))
    return sorted(listed)


def _stream_ids(client: Any, sink: RedisSink, expected: int) -> tuple[Counter[str], int]:
    counts: Counter[str] = Counter()
    unattributable = 0
    id_field = sink.id_field.encode()
    with Progress(f"audit redis:{sink.template.text}", total=expected, unit="entries") as bar:
        for key in _stream_keys(client, sink):
            for entries in _pages(client, key):
                for _, fields in entries:
                    rid = fields.get(id_field)
                    if rid is None:
                        unattributable += 1
                    else:
                        counts[rid.decode(errors="replace")] += 1
                bar.update(len(entries))
    return counts, unattributable


def _pages(client: Any, key: bytes) -> Iterator[list[tuple[bytes, dict[bytes, bytes]]]]:
    start: bytes = b"-"
    while True:
        entries = client.xrange(key, min=start, max="+", count=PAGE)
        if entries:
            yield entries
        if len(entries) < PAGE:
            return
        start = b"(" + entries[-1][0]


def _keys_found(client: Any, sink: RedisSink, expected: Expected) -> Counter[str]:
    """Expected records whose key exists (1 each), and every other key of the template
    (named ``key <name>``)."""
    keys = expected_keys(sink, expected)
    counts: Counter[str] = Counter()
    items = list(keys.items())
    with Progress(f"audit redis:{sink.template.text}", total=len(items), unit="keys") as bar:
        for at in range(0, len(items), PAGE):
            chunk = items[at : at + PAGE]
            pipe = client.pipeline(transaction=False)
            for _, key in chunk:
                pipe.exists(key)
            for (rid, _), found in zip(chunk, pipe.execute(), strict=True):
                if found:
                    counts[rid] += 1
            bar.update(len(chunk))
    known = set(keys.values())
    for raw in client.scan_iter(match=key_pattern(sink.template), count=1000):
        key = raw.decode(errors="replace")
        if key not in known and not key.startswith(sink.prefix):
            counts[f"key {key}"] += 1
    return counts


def expected_keys(sink: RedisSink, expected: Expected) -> dict[str, str]:
    """Record ID -> the key its record is written to, rendered from its key values."""
    columns = list(sink.config.id_columns or ())
    if sink.config.id_from != "columns" or not set(sink.template.fields) <= set(columns):
        raise ConfigError(
            "sink.key_template",
            f"auditing {sink.write} writes needs a key template of id_columns only "
            f"({columns}): a key is found from the expected record's key values",
        )
    keys = {}
    for rid, values in expected.items():
        if len(values) != len(columns):
            raise ConfigError(
                "expected-ids", f"{values!r}: expected {len(columns)} key value(s) {columns}"
            )
        by_column = {c: spark_text(v) for c, v in zip(columns, values, strict=True)}
        keys[rid] = sink.template.text.format_map(by_column)
    return keys
