"""The ``epochstate-kafka`` stream reader: Spark's calls, handed to the coordinated or unaligned planner.

With options ``zookeeper``, ``job`` and ``checkpointLocation`` the source follows
the alignment coordinator (``coordinated``); without, it is a plain unaligned
Kafka source.

Spark calls ``initialOffset``, ``latestOffset``, ``partitions`` and ``commit`` in
one long-lived Python worker on the driver, and ``read`` on the executors with a
pickled copy of the reader; the planner (with its ZooKeeper session and Kafka
admin client) is made on first use and never pickled.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from pyspark.sql.datasource import DataSourceStreamReader, InputPartition

from epochstate.spark_plugin.alignment.connections import shared_registry
from epochstate.spark_plugin.alignment.coordinated import CoordinatedPlanner
from epochstate.spark_plugin.alignment.errors import AlignmentError
from epochstate.spark_plugin.alignment.offsets import SubjectOffset
from epochstate.spark_plugin.alignment.options import SourceOptions
from epochstate.spark_plugin.alignment.partitions import Row, SubjectPartition, read_partition
from epochstate.spark_plugin.alignment.planned import PlannedOffsets
from epochstate.spark_plugin.alignment.unaligned import UnalignedPlanner
from epochstate.spark_plugin.kafka.admin import TopicAdmin

Planner = CoordinatedPlanner | UnalignedPlanner


class SubjectStreamReader(DataSourceStreamReader):
    """Reads a subject aligned (one batch per subject epoch) or unaligned (a Kafka source)."""

    def __init__(self, options: SourceOptions) -> None:
        self.options = options
        self._planner: Planner | None = None

    def initialOffset(self) -> dict[str, Any]:
        return self._plan().initial().to_json()

    # The signature of PySpark < 4.2, on purpose: PySpark 4.2+ still calls it without
    # a start and a read limit, and a limit could not be honoured anyway: an aligned
    # batch is exactly one subject epoch, whatever the trigger asks for.
    def latestOffset(self) -> dict[str, Any]:  # type: ignore[override]
        return self._plan().latest().to_json()

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list[InputPartition]:
        return list(self._plan().partitions(SubjectOffset.from_json(start), SubjectOffset.from_json(end)))

    def read(self, partition: InputPartition) -> Iterator[Row]:
        if not isinstance(partition, SubjectPartition):
            raise AlignmentError(f"not a partition of this source: {partition!r}")
        return read_partition(partition)

    def commit(self, end: dict[str, Any]) -> None:
        self._plan().commit(SubjectOffset.from_json(end))

    def __getstate__(self) -> dict[str, Any]:
        return {"options": self.options, "_planner": None}

    def _plan(self) -> Planner:
        if self._planner is None:
            self._planner = self._new_planner()
        return self._planner

    def _new_planner(self) -> Planner:
        options = self.options
        topic = options.kafka.topic
        admin = TopicAdmin(options.kafka.client)
        registry = None if options.registry is None else shared_registry(options.registry)
        planned = PlannedOffsets(options.checkpoint, topic) if options.checkpoint else None
        if options.coordinated and registry is not None and planned is not None:
            return CoordinatedPlanner(options, registry, planned, admin)
        if options.mode == "aligned":  # SourceOptions.parse refuses this
            raise AlignmentError("aligned mode needs the options zookeeper, job and checkpointLocation")
        return UnalignedPlanner(options, admin, planned, registry)
