"""Column names the protocol adds to a batch on its way to the executor tasks."""

from __future__ import annotations

SHARD_COLUMN = "_eo_shard"
ERROR_COLUMN = "_eo_error"
PAYLOAD_COLUMN = "_eo_payload"
# mode="upsert" (see upsert.py): the row's tombstone flag, and its canonical encoding (the
# within-epoch rule's sort key).
DELETE_COLUMN = "_eo_delete"
ORDER_COLUMN = "_eo_order"
