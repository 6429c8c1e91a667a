"""``format("exactlyonce")``: the Spark Python Data Source (pyspark 4.1 or later)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pyspark.sql.datasource import DataSource

from exactlyonce.integration.datasource.options import sink_config, warn_exposed
from exactlyonce.integration.datasource.support import check_supported
from exactlyonce.integration.datasource.writer import ExactlyOnceStreamWriter

if TYPE_CHECKING:
    from pyspark.sql.types import StructType

NAME = "exactlyonce"


class ExactlyOnceDataSource(DataSource):
    """``df.writeStream.format("exactlyonce").option("sink", "postgres").option(...)``: the
    options are the sink's YAML settings (:mod:`.options`). Stream writes only."""

    def __init__(self, options: dict[str, str]) -> None:
        super().__init__(options)
        # Spark builds the data source when the query is defined, in the driver: refuse bad
        # options there, before any stream runs.
        check_supported(sink_config(options))
        warn_exposed(options)

    @classmethod
    def name(cls) -> str:
        return NAME

    def streamWriter(self, schema: StructType, overwrite: bool) -> ExactlyOnceStreamWriter:  # noqa: N802
        return ExactlyOnceStreamWriter(self.options, schema)
