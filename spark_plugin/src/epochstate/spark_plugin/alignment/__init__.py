"""Epoch alignment between Spark jobs through Kafka subjects (docs/alignment.md; van Kaam ch. 5).

A *subject* is a Kafka topic whose epochs are registered in ZooKeeper: subject
epoch ``k`` is, per partition, the offset range written by batch ``k`` of the
writing query. Register the data source once per SparkSession::

    spark.dataSource.register(EpochStateKafka)   # or register(spark): idempotent

Sink (``df.writeStream.format("epochstate-kafka")``): columns ``value`` and
optionally ``key`` (binary or string). Options: ``topic``; ``bootstrap`` (or
``kafka.bootstrap.servers``; other ``kafka.*`` options go to the producer);
``zookeeper`` (``host:port[/chroot]``); ``zookeeperRoot`` (default
``/epochstate``); ``job`` (default: the query name); ``idempotent`` (default
true); ``subjectRetention`` (the newest subject epochs always kept, default 100,
at least 2: older ones go once no source or daemon needs them, ``retention``);
``shadow`` (default false: the new job of a hot-swap, which registers nothing
until a swap of the topic names it, ``swapping``).
Write task ``i`` writes only Kafka partition ``i``: the topic needs at
least as many partitions as the batch has tasks. Batch ``n`` registers subject
epoch ``n`` once, empty batches included; rows of failed or re-executed attempts
are never read.

Source (``spark.readStream.format("epochstate-kafka")``): rows ``key binary,
value binary, topic string, partition int, offset long, timestamp timestamp,
subject_epoch long``. Options: ``topic``, ``bootstrap`` / ``kafka.*``, ``mode``:

- ``aligned`` (default): each batch reads exactly one subject epoch, the next one
  once it is registered, and the mapping batch -> subject epoch is recorded.
  Needs ``zookeeper``, ``job`` and ``checkpointLocation`` (the same path as the
  query's: PySpark 4.0 does not tell a Python stream reader where a batch
  starts, so the source reads the query's offsets log). ``startingEpoch``:
  ``earliest`` (default, the oldest registered), ``latest`` (the next one to be
  registered) or an epoch number. ``mappingRetention``: source epochs kept in the
  mapping (default 100).
- ``unaligned``: a Kafka source up to the high watermarks. ``startingOffsets``
  ``earliest`` (default), ``latest`` or ``{"<topic>": {"<partition>": offset}}``
  (-2 earliest, -1 latest); ``maxOffsetsPerTrigger`` (needs
  ``checkpointLocation``; unaligned batches only).

With ``zookeeper``, ``job`` and ``checkpointLocation`` the source follows the
alignment coordinator (``coordinator``, ``epochstate align``): ``mode`` is only
how a new query starts; CatchUp, Align(k) and Abort move it between unaligned
and aligned (``commands``, ``protocol``) and it reports its state back. Without
a command it goes on as its newest batch read, also after a restart.

``readTimeoutMs`` bounds how long a read waits for the broker (default 30000).

ZooKeeper (``<root>`` = ``zookeeperRoot``)::

    <root>/subjects/<topic>/epochs/<k>     {"partitions": {"<p>": [start, end]}, "end_position": {"<p>": end},
                                            "writer": job, "query_id": id, "committed_at_ms": ms}: once
    <root>/subjects/<topic>/sources/<job>  {"mode": "aligned"|"unaligned", "mapping": {"<batch>": k},
                                            "command": {"name", "id", "epoch", "issued_at_ms"},
                                            "report": {"state", "position", "subject_epoch", "batch",
                                                       "answers", "refused"}, "updated_at_ms": ms,
                                            "retired": {"source_epoch", "subject_epoch"} (after pruning)}
"""

from epochstate.core.alignment.layout import SubjectLayout
from epochstate.core.alignment.records import SourceRecord, SubjectEpoch
from epochstate.core.alignment.subjects import SubjectRegistry
from epochstate.spark_plugin.alignment.datasource import FORMAT, EpochStateKafka, register
from epochstate.spark_plugin.alignment.errors import (
    AlignmentError,
    CheckpointMismatch,
    CorruptSubjectRecord,
    EpochWrittenByAnotherQuery,
    InvalidOption,
    InvalidSubjectName,
    InvalidTransition,
    NotAnswered,
    RegistryUnavailable,
    SourceNotFound,
    SubjectNotFound,
    TooFewPartitions,
)
from epochstate.spark_plugin.alignment.offsets import SubjectOffset

__all__ = [
    "FORMAT",
    "AlignmentError",
    "CheckpointMismatch",
    "CorruptSubjectRecord",
    "EpochStateKafka",
    "EpochWrittenByAnotherQuery",
    "InvalidOption",
    "InvalidSubjectName",
    "InvalidTransition",
    "NotAnswered",
    "RegistryUnavailable",
    "SourceNotFound",
    "SourceRecord",
    "SubjectEpoch",
    "SubjectLayout",
    "SubjectNotFound",
    "SubjectOffset",
    "SubjectRegistry",
    "TooFewPartitions",
    "register",
]
