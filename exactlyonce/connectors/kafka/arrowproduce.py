"""The Kafka sink's hot loop in native code: a shard task's records, produced from their Arrow
columns into the task's open transaction, one ``eo`` header each (wire format 1).

The Python loop (:meth:`~.task.KafkaShardTask._write_records`) builds a bytes object per
value and ID and a header list per record, which confluent-kafka's ``produce()`` parses again:
most of a task's CPU (issue 34). The extension ``_arrowproduce`` (``_arrowproduce.c``, built
by ``pip install`` where a C compiler is) reads the Arrow buffers as they are and calls
librdkafka's ``rd_kafka_produceva()`` on the Producer's own handle: the same messages, keys
and headers, byte for byte (a test reads both back with kafka-python).

:func:`native_loop` says whether it can be used here. It is used only when all of these hold,
else the sink produces from Python, as before:

- the extension was built and imports;
- confluent-kafka's librdkafka is found among the process's loaded libraries (Linux's
  ``/proc/self/maps``) and has ``rd_kafka_produceva`` (librdkafka 1.x's later releases, 2.x);
- a probe Producer's handle reads back the ``client.id`` it was given (the extension reads the
  handle where confluent-kafka keeps it: this proves that layout before any record relies on
  it);
- ``EXACTLYONCE_NATIVE`` is not ``0`` (:mod:`exactlyonce.dedup.native`: the switch back to
  the Python loop, for a measurement, or a platform where the probe passes and something else
  does not).
"""

from __future__ import annotations

import functools
import logging
import os
import uuid
from collections.abc import Callable
from typing import Any

import pyarrow as pa

from exactlyonce.dedup.native import extension

log = logging.getLogger(__name__)

QUEUE_FULL = -184  # RD_KAFKA_RESP_ERR__QUEUE_FULL: librdkafka's local queue is full
TOO_LARGE = 10  # RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE

# (validity or None, offsets, data, 64-bit offsets?, offset, length): a binary column as the
# extension reads it.
ColumnBuffers = tuple[Any, Any, Any, int, int, int]


def column_buffers(array: pa.Array) -> ColumnBuffers:
    """The buffers of a binary or string Arrow array, as ``_arrowproduce.produce`` takes them."""
    if isinstance(array, pa.ChunkedArray):
        array = array.combine_chunks()
    kind = array.type
    if pa.types.is_large_binary(kind) or pa.types.is_large_string(kind):
        wide = 1
    elif pa.types.is_binary(kind) or pa.types.is_string(kind):
        wide = 0
    else:
        raise TypeError(f"a binary or string column, not {kind}")
    validity, offsets, data = array.buffers()[:3]
    if validity is not None and array.null_count == 0:
        validity = None
    return (validity, offsets, data if data is not None else b"", wide, array.offset, len(array))


@functools.cache
def native_loop() -> Any | None:
    """The loaded extension module, or None where the Python loop must be used (why is
    logged once, at debug level: the Python loop is correct, only slower)."""
    _arrowproduce = extension(f"{__package__}._arrowproduce")
    if _arrowproduce is None:
        return None
    path = _loaded_librdkafka()
    if path is None:
        log.debug("native produce loop: confluent-kafka's librdkafka not found in this process")
        return None
    from confluent_kafka import Producer

    try:
        _arrowproduce.load(path, Producer)
        if not _handle_layout_matches(_arrowproduce):
            log.debug("native produce loop: confluent-kafka's Producer layout is not the known one")
            return None
    except (ImportError, RuntimeError, TypeError) as exc:
        log.debug("native produce loop: %s", exc)
        return None
    return _arrowproduce


def _loaded_librdkafka() -> str | None:
    """The path of the librdkafka confluent-kafka's extension loaded, from the process's
    memory map (Linux); None elsewhere or when it is not there."""
    import confluent_kafka.cimpl  # noqa: F401  (loads librdkafka)

    try:
        with open("/proc/self/maps", encoding="utf-8", errors="replace") as maps:
            for line in maps:
                path = line.rstrip("\n").split(maxsplit=5)[-1]
                if "librdkafka" in os.path.basename(path) and path.startswith("/"):
                    return path
    except OSError:
        return None
    return None


def _handle_layout_matches(module: Any) -> bool:
    """Whether the extension finds the rd_kafka_t of a Producer where it looks: a probe
    Producer (no broker needed) named ``client.id`` reads back under that name."""
    from confluent_kafka import Producer

    name = f"eo-probe-{uuid.uuid4().hex[:12]}"
    probe = Producer({"client.id": name, "bootstrap.servers": "127.0.0.1:1", "log_level": 0})
    try:
        return str(module.client_name(probe)).startswith(name + "#producer-")
    finally:
        del probe


def produce_columns(
    module: Any,
    producer: Any,
    topic: str,
    values: pa.Array,
    keys: pa.Array | None,
    header: tuple[str, bytes],
    ids: pa.Array,
    on_refused: Callable[[int], bool],
) -> list[int]:
    """Produce every row: ``values`` (null: a tombstone), ``keys`` (None: no key) and the
    header ``header[0]`` = ``header[1]`` + the row's ID. A full local queue is waited out
    (``producer.poll``). A row librdkafka refuses for another reason goes to ``on_refused(i)``
    (the Python path for that one record: it raises what produce() would raise, or returns
    False when the record is too large for a message). Returns the rows too large."""
    value_buffers, id_buffers = column_buffers(values), column_buffers(ids)
    key_buffers = column_buffers(keys) if keys is not None else None
    name, prefix = header
    too_large: list[int] = []
    start = 0
    while True:
        at, code = module.produce(
            producer, topic, -1, value_buffers, key_buffers, name, prefix, id_buffers, start
        )
        if code == 0:
            return too_large
        if code == QUEUE_FULL:
            producer.poll(0.05)  # let deliveries drain, then go on from the refused row
            start = at
            continue
        if not on_refused(at):
            too_large.append(at)
        start = at + 1
