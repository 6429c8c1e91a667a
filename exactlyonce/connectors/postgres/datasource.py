"""The PostgreSQL sink on the data source path: the user's columns as they are, then the
record ID and the epoch (``epoch_column``); a second write of a record is a no-op through
the unique record-ID index (``mode="insert"``, the only mode this path takes)."""

from __future__ import annotations

from exactlyonce.connectors.base.shape import DataSourceTraits

DATASOURCE = DataSourceTraits()
