"""Arrow arrays built from, and read into, plain values without pyarrow importing pandas.

pyarrow's ``pa.array()`` of Python objects or numpy, ``pa.scalar()`` and ``Array.to_numpy()``
all ask whether pandas is installed, which imports it: about 1.3 s in each fresh Spark Python
worker, paid by the first epoch of every (re)start. The task path therefore builds its small
arrays from raw buffers (``Array.from_buffers``) and reads its integer columns with
``np.frombuffer``; pyarrow's compute functions never touch pandas.
"""

from __future__ import annotations

from array import array
from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa

_NUMPY_INTS = {
    pa.int8(): np.int8,
    pa.int16(): np.int16,
    pa.int32(): np.int32,
    pa.int64(): np.int64,
}


def int64s(values: Sequence[int]) -> pa.Array:
    """A non-null int64 array of ``values``."""
    return pa.Array.from_buffers(pa.int64(), len(values), [None, pa.py_buffer(array("q", values))])


def ints_like(values: Sequence[int], type_: pa.DataType) -> pa.Array:
    """A non-null integer array of ``values`` with the integer type ``type_``."""
    dtype = _NUMPY_INTS[type_]
    data = np.asarray(values, dtype=dtype) if values else np.zeros(0, dtype=dtype)
    return pa.Array.from_buffers(type_, len(values), [None, pa.py_buffer(data)])


def int32_lists(lists: Sequence[Sequence[int]]) -> pa.Array:
    """A non-null ``list<int32>`` array, one list per element of ``lists``."""
    flat = array("i", (v for values in lists for v in values))
    offsets = array("i", [0])
    for values in lists:
        offsets.append(offsets[-1] + len(values))
    child = pa.Array.from_buffers(pa.int32(), len(flat), [None, pa.py_buffer(flat)])
    return pa.Array.from_buffers(
        pa.list_(pa.int32()), len(lists), [None, pa.py_buffer(offsets)], children=[child]
    )


def strings(values: Sequence[str | None]) -> pa.Array:
    """A utf-8 string array of ``values`` (None is null)."""
    encoded = [b"" if v is None else v.encode() for v in values]
    offsets = array("i", [0])
    for value in encoded:
        offsets.append(offsets[-1] + len(value))
    valid = np.array([v is not None for v in values], dtype=bool)
    validity = None if valid.all() else pa.py_buffer(np.packbits(valid, bitorder="little"))
    return pa.Array.from_buffers(
        pa.string(), len(values), [validity, pa.py_buffer(offsets), pa.py_buffer(b"".join(encoded))]
    )


def bools(mask: Any) -> pa.Array:
    """A non-null boolean array of a numpy boolean ``mask``."""
    bits = np.packbits(np.asarray(mask, dtype=bool), bitorder="little")
    return pa.Array.from_buffers(pa.bool_(), len(mask), [None, pa.py_buffer(bits)])


def int_values(column: pa.Array | pa.ChunkedArray) -> Any:
    """The values of a non-null integer column as a numpy array (a view when possible)."""
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks()
    if column.null_count:
        raise ValueError("int_values() wants a column without nulls")
    dtype = _NUMPY_INTS[column.type]
    data = column.buffers()[1]
    if data is None:
        return np.zeros(0, dtype=dtype)
    return np.frombuffer(
        data, dtype=dtype, count=len(column), offset=column.offset * dtype().itemsize
    )
