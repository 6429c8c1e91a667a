"""Binary COPY: a batch goes in binary only when every column keeps its exact form."""

from __future__ import annotations

import hashlib
import struct
import uuid

import pyarrow as pa

from exactlyonce.connectors.postgres.binary import binary_copy, uuid_bytes

TYPES = {"id": "text", "value": "bigint", "record_id": "uuid", "epoch": "bigint"}
HEADER = b"PGCOPY\n\xff\r\n\x00" + struct.pack("!ii", 0, 0)


def _ids(*keys: str) -> list[str]:
    return [hashlib.md5(k.encode()).hexdigest() for k in keys]


def _batch(ids: list[str | None], **more: pa.Array) -> pa.RecordBatch:
    n = len(ids)
    columns = {
        "id": pa.array([f"k{i}" for i in range(n)]),
        "value": pa.array(range(n), pa.int64()),
        "record_id": pa.array(ids, pa.string()),
        "epoch": pa.array([7] * n, pa.int64()),
        **more,
    }
    return pa.RecordBatch.from_pydict(columns)


def test_record_ids_become_the_uuids_postgres_reads_from_their_hex() -> None:
    ids = _ids("a", "b", "c")
    packed = uuid_bytes(pa.array(ids).slice(1))  # a slice: offsets do not start at 0
    assert packed is not None
    assert packed.to_pylist() == [uuid.UUID(h).bytes for h in ids[1:]]
    upper = uuid_bytes(pa.array([ids[0].upper()]))
    assert upper is not None and upper.to_pylist() == [uuid.UUID(ids[0]).bytes]


def test_an_id_that_is_not_32_hex_digits_or_null_keeps_the_batch_in_csv() -> None:
    good = _ids("a")[0]
    assert uuid_bytes(pa.array([good, good[:31]])) is None
    assert uuid_bytes(pa.array([good, "g" * 32])) is None
    assert uuid_bytes(pa.array([good, None], pa.string())) is None


def test_a_batch_whose_columns_match_the_table_is_one_binary_copy_stream() -> None:
    ids = _ids("a", "b")
    data = binary_copy(_batch(ids), TYPES, "record_id")
    assert data is not None
    assert data.startswith(HEADER) and data.endswith(b"\xff\xff")
    first_row = data[len(HEADER) :]
    assert struct.unpack("!h", first_row[:2]) == (4,)  # four fields
    assert uuid.UUID(ids[0]).bytes in data and uuid.UUID(ids[1]).bytes in data
    assert ids[0].encode() not in data  # the hex form never travels


def test_nulls_and_awkward_text_travel_as_they_are() -> None:
    ids = _ids("a", "b")
    batch = pa.RecordBatch.from_pydict({
        "id": pa.array(['a,"b"\nc', None]), "value": pa.array([None, 2], pa.int64()),
        "record_id": pa.array(ids), "epoch": pa.array([1, 1], pa.int64()),
    })  # fmt: skip
    data = binary_copy(batch, TYPES, "record_id")
    assert data is not None and b'a,"b"\nc' in data


def test_any_column_not_in_its_exact_wire_form_sends_csv() -> None:
    ids = _ids("a")
    assert binary_copy(_batch(ids), {**TYPES, "value": "integer"}, "record_id") is None
    assert binary_copy(_batch(ids), {**TYPES, "id": "character varying(5)"}, "record_id") is None
    assert (
        binary_copy(_batch(ids), {k: v for k, v in TYPES.items() if k != "epoch"}, "record_id")
        is None
    )
    stamped = _batch(ids, at=pa.array([0], pa.timestamp("us")))
    assert binary_copy(stamped, {**TYPES, "at": "timestamp without time zone"}, "record_id") is None
    assert binary_copy(_batch(ids), {**TYPES, "record_id": "text"}, "record_id") is not None
