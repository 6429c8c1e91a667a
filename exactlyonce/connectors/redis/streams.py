"""The catalog rebuild of ``write="stream"``: the record IDs and epochs of every stream the
sink appended to (listed in ``<prefix>:streams``), read back from the entries themselves."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from typing import Any, TypeVar

import numpy as np

T = TypeVar("T")
PAGE = 20_000


def stream_ids(
    client: Any,
    registry_key: str,
    id_field: str,
    epoch_field: str,
    from_epoch: int,
    reaching: Callable[[], AbstractContextManager[None]],
    patient: Callable[[Callable[[], list[Any]]], list[Any]],
) -> Iterator[tuple[Any, Any]]:
    """(IDs, epochs) arrays of the entries at or after ``from_epoch``, page by page.

    Exact while the streams are neither trimmed nor expired. ``reaching`` maps connection
    errors; ``patient`` waits out BUSY.
    """
    idf, ef = id_field.encode(), epoch_field.encode()
    with reaching():
        keys = patient(lambda: list(client.sscan_iter(registry_key, count=1000)))
    for key in keys:
        start: bytes = b"-"
        while True:
            with reaching():
                entries = client.xrange(key, min=start, max="+", count=PAGE)
            mine = [(f[idf], int(f[ef])) for _, f in entries if idf in f and ef in f]
            ids = [rid for rid, at in mine if at >= from_epoch]
            if ids:
                epochs = [at for _, at in mine if at >= from_epoch]
                yield np.array(ids, dtype="S32"), np.array(epochs, dtype=np.int64)
            if len(entries) < PAGE:
                break
            start = b"(" + entries[-1][0]
