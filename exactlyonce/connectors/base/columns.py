"""Column names the protocol adds to a batch on its way to the executor tasks."""

from __future__ import annotations

SHARD_COLUMN = "_eo_shard"
ERROR_COLUMN = "_eo_error"
PAYLOAD_COLUMN = "_eo_payload"
