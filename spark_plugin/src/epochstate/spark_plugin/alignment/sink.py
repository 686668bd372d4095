"""The ``epochstate-kafka`` stream writer: each task writes its own partition; commit registers the epoch.

Task ``i`` of a batch writes only to Kafka partition ``i`` and reports the exact
offset range its rows got. The driver's commit of batch ``n`` registers subject
epoch ``n`` with those ranges. A failed or re-executed attempt's rows stay in the
log outside every registered range, so readers of the subject never see them.
Speculative execution must be off: two attempts of one task writing at once make
the ranges interleave, which the writer detects and fails the task for.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass

from pyspark import TaskContext
from pyspark.sql import Row
from pyspark.sql.datasource import DataSourceStreamWriter, WriterCommitMessage
from pyspark.sql.types import BinaryType, StringType, StructType

from epochstate.core.alignment.ranges import OffsetRange
from epochstate.core.alignment.records import SubjectEpoch
from epochstate.core.alignment.retention import SubjectRetention
from epochstate.core.alignment.subjects import SubjectRegistry, wall_clock_ms
from epochstate.core.checkpoint.errors import SourceError
from epochstate.core.checkpoint.log import QueryLog
from epochstate.core.zookeeper.errors import RegistryError
from epochstate.spark_plugin.alignment.connections import shared_registry
from epochstate.spark_plugin.alignment.errors import AlignmentError, InvalidOption, TooFewPartitions
from epochstate.spark_plugin.alignment.options import SinkOptions
from epochstate.spark_plugin.alignment.swapping import SwapGate
from epochstate.spark_plugin.kafka.admin import TopicAdmin
from epochstate.spark_plugin.kafka.producer import PartitionWriter
from epochstate.spark_plugin.zip_imports import steady_zip_imports

log = logging.getLogger(__name__)

# Spark sets these on the jobs of a streaming batch; tasks see them as local properties.
QUERY_ID_PROPERTY = "sql.streaming.queryId"
BATCH_ID_PROPERTY = "streaming.sql.batchId"


@dataclass(frozen=True)
class PartitionWritten(WriterCommitMessage):
    """What one task attempt wrote: ``offset_range`` of Kafka partition ``partition`` (None: no rows)."""

    partition: int
    offset_range: OffsetRange | None
    attempt: int = 0
    query_id: str | None = None


@dataclass(frozen=True)
class RowLayout:
    """Where the key and value are in the rows given to the sink, and whether they are text."""

    value: int
    value_is_text: bool
    key: int | None = None
    key_is_text: bool = False

    @classmethod
    def of(cls, schema: StructType) -> RowLayout:
        """The layout of ``schema``: a ``value`` column and an optional ``key``, binary or string."""
        names = [f.name for f in schema.fields]
        extra = sorted(set(names) - {"key", "value"})
        if "value" not in names or extra:
            raise InvalidOption(
                f"the epochstate-kafka sink takes the columns value and optionally key, not {names}"
            )
        kinds = {f.name: f.dataType for f in schema.fields}
        for name, kind in kinds.items():
            if not isinstance(kind, (BinaryType, StringType)):
                raise InvalidOption(f"column {name} must be binary or string, not {kind.simpleString()}")
        return cls(
            value=names.index("value"),
            value_is_text=isinstance(kinds["value"], StringType),
            key=names.index("key") if "key" in names else None,
            key_is_text=isinstance(kinds.get("key"), StringType),
        )

    def key_value(self, row: Sequence[object]) -> tuple[bytes | None, bytes | None]:
        key = None if self.key is None else _bytes(row[self.key], self.key_is_text)
        return key, _bytes(row[self.value], self.value_is_text)


def shadow_skips(options: SinkOptions, batch: int) -> bool:
    """Whether a shadow sink's task may write nothing for ``batch`` (``SwapGate.skips``).

    When ZooKeeper cannot say, the task writes: rows outside every registered
    range are never read, rows missing from a registered one would be lost.
    """
    try:
        registry = shared_registry(options.registry)
        return SwapGate(registry, options.kafka.topic, options.job, shadow=True).skips(batch)
    except (AlignmentError, RegistryError) as error:
        topic = options.kafka.topic
        log.warning("batch %d writes its rows: the swap of %r could not be read: %s", batch, topic, error)
        return False


def write_partition(
    options: SinkOptions,
    layout: RowLayout,
    partition: int,
    rows: Iterable[Sequence[object]],
    *,
    attempt: int = 0,
    query_id: str | None = None,
) -> PartitionWritten:
    """Write ``rows`` to Kafka partition ``partition``; what they occupy there.

    Raises:
        TooFewPartitions: the topic has no partition ``partition``.
        DeliveryFailed, InterleavedWrite: see :class:`PartitionWriter`.
    """
    check_partition(options.kafka.client, options.kafka.topic, partition)
    with PartitionWriter(
        options.kafka.client, options.kafka.topic, partition, idempotent=options.idempotent
    ) as writer:
        for row in rows:
            key, value = layout.key_value(row)
            writer.write(key, value)
        written = writer.finish()
    return PartitionWritten(partition, written, attempt, query_id)


class SubjectStreamWriter(DataSourceStreamWriter):
    """Writes a stream to a subject: batch ``n`` becomes subject epoch ``n``."""

    def __init__(self, options: SinkOptions, layout: RowLayout) -> None:
        self.options = options
        self.layout = layout

    def write(self, iterator: Iterator[Row]) -> PartitionWritten:
        steady_zip_imports()  # for the next tasks of this worker
        context = TaskContext.get()
        if context is None:
            raise AlignmentError("the sink's write runs in a Spark task")
        query_id = context.getLocalProperty(QUERY_ID_PROPERTY)
        batch = context.getLocalProperty(BATCH_ID_PROPERTY)
        if self.options.shadow and batch is not None and shadow_skips(self.options, int(batch)):
            return PartitionWritten(context.partitionId(), None, context.attemptNumber(), query_id)
        return write_partition(
            self.options,
            self.layout,
            context.partitionId(),
            iterator,
            attempt=context.attemptNumber(),
            query_id=query_id,
        )

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Register subject epoch ``batchId`` with the tasks' ranges (empty batches too).

        In a hot-swap of the subject (``swapping``) the batch registers only when
        its job owns the batch's input epoch, the new job as the epoch after the
        old job's last one; a shadow sink registers nothing before a swap names it.

        If the epoch is registered already, the batch was re-executed after a
        failure between this commit and Spark's: the epoch keeps its ranges and
        the rows written this time are never read.

        Raises:
            EpochWrittenByAnotherQuery: the epoch belongs to another query.
            RegistryUnavailable: ZooKeeper did not answer (Spark retries the batch).
        """
        steady_zip_imports()  # for the next commits in this worker
        written = [m for m in messages if isinstance(m, PartitionWritten)]
        if len(written) != len(messages):
            raise AlignmentError(f"batch {batchId}: {len(messages) - len(written)} tasks reported nothing")
        registry = shared_registry(self.options.registry)
        gate = SwapGate(registry, self.options.kafka.topic, self.options.job, shadow=self.options.shadow)
        registration = gate.decide(batchId)
        if registration.epoch is None:
            log.info(
                "batch %d registers nothing in subject %r: job %r does not own its output (%s)",
                batchId,
                self.options.kafka.topic,
                self.options.job,
                "shadow" if registration.input_epoch is None else f"input epoch {registration.input_epoch}",
            )
            return
        number = registration.epoch
        # Epoch k is registered only once epoch k - 1 is; its end position carries over.
        previous = registry.get_epoch(self.options.kafka.topic, number - 1) if number > 0 else None
        epoch = SubjectEpoch(
            topic=self.options.kafka.topic,
            epoch=number,
            ranges=tuple(m.offset_range for m in written if m.offset_range is not None),
            writer=self.options.job,
            query_id=next((m.query_id for m in written if m.query_id), None) or self._checkpoint_query_id(),
            committed_at_ms=wall_clock_ms(),
            end_position={} if previous is None else previous.end_position,
        )
        if not registry.register_epoch(epoch):
            log.warning(
                "batch %d re-executed: epoch %d of subject %r keeps the ranges registered first; "
                "the rows written now (%s) lie outside them and are never read",
                batchId,
                number,
                epoch.topic,
                ", ".join(map(str, epoch.ranges)) or "none",
            )
        gate.registered(registration)
        self._prune(registry, batchId)

    def _prune(self, registry: SubjectRegistry, batch: int) -> None:
        """Apply the subject's retention every tenth of ``subjectRetention`` epochs; never fail the batch."""
        keep = self.options.subject_retention
        if batch % max(1, keep // 10) != 0:
            return
        try:
            SubjectRetention(registry, keep).prune(self.options.kafka.topic)
        except AlignmentError as error:
            log.warning("retention of subject %r did not run: %s", self.options.kafka.topic, error)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Register nothing: the rows written by the batch's tasks are never read."""
        log.warning("batch %d aborted: subject %r gets no epoch for it", batchId, self.options.kafka.topic)

    def _checkpoint_query_id(self) -> str | None:
        if self.options.checkpoint is None:
            return None
        try:
            return QueryLog(self.options.checkpoint).query_id()
        except SourceError:
            return None


_partition_counts: dict[tuple[str, str], int] = {}
_counts_lock = threading.Lock()


def check_partition(client: Mapping[str, str], topic: str, partition: int) -> None:
    """Raise TooFewPartitions unless ``topic`` has partition ``partition``.

    Partition counts only grow, so a count once seen is asked again only for a
    partition beyond it.
    """
    key = (str(client.get("bootstrap.servers")), topic)
    with _counts_lock:
        count = _partition_counts.get(key, 0)
    if partition < count:
        return
    count = len(TopicAdmin(client).partitions_of(topic))
    with _counts_lock:
        _partition_counts[key] = count
    if partition >= count:
        raise TooFewPartitions(
            f"write task {partition} needs Kafka partition {partition}, but topic {topic!r} has {count} "
            f"partitions and the batch at least {partition + 1} tasks; each task writes only its own "
            f"partition: repartition the stream to at most {count} partitions, or add partitions to the topic"
        )


def _bytes(value: object, is_text: bool) -> bytes | None:
    if value is None:
        return None
    if is_text:
        return str(value).encode("utf-8")
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value)
    raise AlignmentError(f"expected binary, got {type(value).__name__}")
