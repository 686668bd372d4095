"""The source's input partitions and the rows read from them (on the executors)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from datetime import datetime, timezone

from pyspark.sql.datasource import InputPartition
from pyspark.sql.types import (
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from epochstate.core.alignment.ranges import OffsetRange
from epochstate.spark_plugin.kafka.reader import read_range
from epochstate.spark_plugin.zip_imports import steady_zip_imports

# The columns of the rows the source returns, in order.
SOURCE_SCHEMA = StructType(
    [
        StructField("key", BinaryType()),
        StructField("value", BinaryType()),
        StructField("topic", StringType()),
        StructField("partition", IntegerType()),
        StructField("offset", LongType()),
        StructField("timestamp", TimestampType()),
        StructField("subject_epoch", LongType()),
    ]
)

Row = tuple[bytes | None, bytes | None, str, int, int, datetime | None, int | None]


class SubjectPartition(InputPartition):
    """One exact offset range to read: part of subject epoch ``subject_epoch`` (None unaligned)."""

    def __init__(
        self, offset_range: OffsetRange, subject_epoch: int | None, client: Mapping[str, str], timeout: float
    ) -> None:
        super().__init__(str(offset_range))
        self.offset_range = offset_range
        self.subject_epoch = subject_epoch
        self.client = dict(client)
        self.timeout = timeout


def read_partition(partition: SubjectPartition) -> Iterator[Row]:
    """The records of the partition's range as rows of SOURCE_SCHEMA, in offset order."""
    steady_zip_imports()  # for the next tasks of this worker
    wanted = partition.offset_range
    for record in read_range(partition.client, wanted, timeout=partition.timeout):
        yield (
            record.key,
            record.value,
            wanted.topic,
            wanted.partition,
            record.offset,
            None if record.timestamp is None else _utc(record.timestamp),
            partition.subject_epoch,
        )


def _utc(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, tz=timezone.utc)


__all__ = ["SOURCE_SCHEMA", "Row", "SubjectPartition", "read_partition"]
