"""Events from JSON files into PostgreSQL through an exactlyonce sink, in a Spark Declarative
Pipeline: ``spark-pipelines run`` from the project's directory.

Settings from the environment: ``EXACTLYONCE_PG_DSN`` (required; `exactlyonce services env`
prints it for the local services), ``EVENTS_INPUT`` (the JSON files, default ``input/``),
``EVENTS_TABLE`` (default ``sdp_events``) and ``EVENTS_QUERY_NAME`` (the sink head's name,
default the flow's: ``events``).
"""

import os
from pathlib import Path

from pyspark import pipelines as dp
from pyspark.sql import DataFrame, SparkSession

from exactlyonce.integration.declarative import create_sink

spark = SparkSession.active()  # SDP hands this file its session as `spark`; the same one
INPUT = os.environ.get("EVENTS_INPUT", str(Path("input").resolve()))

create_sink(
    "events_pg",
    {
        "sink": "postgres",
        "dsn": "${EXACTLYONCE_PG_DSN}",  # read where the sink runs, never in the plan
        "table": os.environ.get("EVENTS_TABLE", "sdp_events"),
        "id_columns": ["event_id"],
        "query_name": os.environ.get("EVENTS_QUERY_NAME", "events"),
    },
)


@dp.append_flow(target="events_pg")
def events() -> DataFrame:
    return (
        spark.readStream.schema("event_id STRING, amount BIGINT, action STRING")
        .option("maxFilesPerTrigger", 1)
        .json(INPUT)
    )
