"""``value="avro"``: each row as one Avro binary datum, under the schema Spark derives.

The writer schema is Spark's own (``spark-avro``'s ``SchemaConverters.toAvroType``) for the
stream's schema: a record named ``topLevelRecord`` with no namespace, one field per column in
column order; a nullable column is the union ``[type, "null"]``; a timestamp is a ``long``
``timestamp-micros``, a timestamp without time zone ``local-timestamp-micros``, a date an
``int`` ``date``, a decimal a ``fixed`` ``decimal``; a nested struct is a record named after its
field, in the namespace of its parent's name. No schema travels with a message: a reader gets
it from :func:`avro_schema` (the same stream schema gives the same Avro schema).

Runs on the driver with an active Spark session whose class path has ``spark-avro``
(:func:`exactlyonce.integration.spark.session` puts it there).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from exactlyonce.errors import ConfigError

if TYPE_CHECKING:
    from pyspark.sql import Column
    from pyspark.sql.types import StructType

AVRO = "avro"
RECORD_NAME = "topLevelRecord"


def avro_schema(schema: StructType) -> str:
    """The Avro schema (JSON) the sink writes rows of ``schema`` under. Raises ConfigError
    naming ``value`` and the first column whose type Avro cannot hold (a map with non-string
    keys, an interval, a NULL-typed column with no type...)."""
    try:
        return _to_avro_type(schema)
    except Exception as whole:
        for field in schema.fields:
            try:
                _to_avro_type(_only(schema, field.name))
            except Exception as exc:
                raise ConfigError(
                    "value",
                    f"column {field.name!r} is {field.dataType.simpleString()}, which Avro "
                    f"cannot hold: {_reason(exc)}",
                ) from None
        reason = f"Spark cannot derive an Avro schema: {_reason(whole)}"
        raise ConfigError("value", reason) from None


def avro_value(schema: StructType) -> Column:
    """The row's columns as one Avro datum, written under :func:`avro_schema`."""
    from pyspark.sql import functions as F
    from pyspark.sql.avro.functions import to_avro

    return to_avro(F.struct(*map(F.col, schema.names)), avro_schema(schema))


def _to_avro_type(schema: StructType) -> str:
    from pyspark.sql import SparkSession

    spark = SparkSession.getActiveSession()
    if spark is None:
        raise ConfigError("value", "value='avro' needs an active Spark session on the driver")
    jvm: Any = spark._jvm
    data_type = spark._jsparkSession.parseDataType(schema.json())
    converters = jvm.org.apache.spark.sql.avro.SchemaConverters
    return str(converters.toAvroType(data_type, False, RECORD_NAME, "").toString())


def _only(schema: StructType, name: str) -> StructType:
    from pyspark.sql.types import StructType

    return StructType([schema[name]])


def _reason(exc: Exception) -> str:
    """The JVM exception's own message (py4j wraps it in a long trace), or the Python one."""
    java = getattr(exc, "java_exception", None)
    if java is not None:
        return str(java.getMessage())
    return str(exc)
