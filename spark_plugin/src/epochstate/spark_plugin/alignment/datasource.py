"""The ``epochstate-kafka`` data source: register it, then read and write subjects by that name."""

from __future__ import annotations

from typing import Any

from pyspark.sql.datasource import DataSource
from pyspark.sql.types import StructType

from epochstate.spark_plugin.alignment.errors import InvalidOption
from epochstate.spark_plugin.alignment.options import SinkOptions, SourceOptions
from epochstate.spark_plugin.alignment.partitions import SOURCE_SCHEMA
from epochstate.spark_plugin.alignment.sink import RowLayout, SubjectStreamWriter
from epochstate.spark_plugin.alignment.source import SubjectStreamReader

FORMAT = "epochstate-kafka"


class EpochStateKafka(DataSource):
    """Kafka subjects with epochs aligned across Spark jobs (streaming read and write).

    Register per SparkSession: ``spark.dataSource.register(EpochStateKafka)``.
    """

    @classmethod
    def name(cls) -> str:
        return FORMAT

    def schema(self) -> StructType:
        return SOURCE_SCHEMA

    def streamReader(self, schema: StructType) -> SubjectStreamReader:
        if [(f.name, f.dataType) for f in schema.fields] != [(f.name, f.dataType) for f in SOURCE_SCHEMA]:
            raise InvalidOption(
                f"the {FORMAT} source has the fixed schema {SOURCE_SCHEMA.simpleString()}, "
                f"not {schema.simpleString()}"
            )
        return SubjectStreamReader(SourceOptions.parse(self.options))

    def streamWriter(self, schema: StructType, overwrite: bool) -> SubjectStreamWriter:
        return SubjectStreamWriter(SinkOptions.parse(self.options), RowLayout.of(schema))


def register(spark: Any) -> None:
    """Register the ``epochstate-kafka`` data source with ``spark`` (idempotent).

    Spark keeps data source registrations in state its sessions share, so a second
    registration (another session, a notebook re-run) is not an error here.
    """
    from pyspark.errors import AnalysisException

    try:
        spark.dataSource.register(EpochStateKafka)
    except AnalysisException as error:
        if "DATA_SOURCE_ALREADY_EXISTS" not in str(getattr(error, "getErrorClass", lambda: "")() or error):
            raise
