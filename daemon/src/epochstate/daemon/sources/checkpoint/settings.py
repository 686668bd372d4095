"""The settings Spark pins in each epoch's offset log entry, and which of them this daemon knows.

Spark writes into every ``offsets/<epoch>`` the SQL settings that decide how the
query's state is planned and written (``OffsetSeqMetadata``'s relevant settings),
and applies them again when the query restarts, whatever the new session says. A
release that writes state in a new way adds its setting to that list. So the
daemon's rule for a shape it does not understand is: an epoch whose entry names a
setting not listed here is refused (its state may be written in a way no reader
here was built for), with the setting in the reason, never read on a guess. The
values of the settings listed are checked where they matter: the provider and its
codecs, formats and encodings by the readers (:mod:`epochstate.daemon.sources`),
the partition count by :meth:`Checkpoint.state_partitions`.
"""

from __future__ import annotations

from collections.abc import Mapping

from epochstate.daemon.sources.errors import UnsupportedCheckpoint

KNOWN_SETTINGS: Mapping[str, str] = {
    # Spark 3.5 and earlier
    "spark.sql.shuffle.partitions": "the state's partition count at the epoch",
    "spark.sql.streaming.stateStore.providerClass": "HDFS-backed or RocksDB; others refused",
    "spark.sql.streaming.multipleWatermarkPolicy": "event time only; not in the state's layout",
    "spark.sql.streaming.flatMapGroupsWithState.stateFormatVersion": "read: the value schema says it",
    "spark.sql.streaming.aggregation.stateFormatVersion": "read: the value schema says it",
    "spark.sql.streaming.join.stateFormatVersion": "read: the stores' schemas say it",
    "spark.sql.streaming.stateStore.compression.codec": "checked by the file readers",
    "spark.sql.streaming.stateStore.rocksdb.formatVersion": "RocksDB's table format, read by the SST reader",
    "spark.sql.streaming.statefulOperator.useStrictDistribution": "planning only",
    "spark.sql.optimizer.pruneFiltersCanPruneStreamingSubplan": "planning only",
    # Spark 4.0
    "spark.sql.streaming.stateStore.encodingFormat": "unsaferow; avro for transformWithState",
    # Spark 4.1
    "spark.sql.streaming.stateStore.rowChecksum.enabled": "checked by the readers",
    "spark.sql.function.protobufExtensions.enabled": "planning only",
    "spark.sql.streaming.queryEvolution.enableSourceEvolution": "sources only",
    # Spark 4.2
    "spark.sql.streaming.stateStore.rocksdb.mergeOperatorVersion": "list state's delimiter",
    # Spark 4.3
    "spark.sql.streaming.statefulOperator.alwaysNullableOutput.enabled": "read: the schemas say it",
    "spark.sql.dropDuplicates.deterministicKeyOrder.enabled": "read: the key schema says it",
}
"""Every setting Spark 3.5 to 4.3 pins per epoch, with what the daemon does with it."""


def check_settings(conf: Mapping[str, str], where: str) -> None:
    """Refuse an epoch whose pinned settings name one this daemon does not know.

    Raises:
        UnsupportedCheckpoint: naming the unknown settings and their values.
    """
    unknown = sorted(set(conf) - KNOWN_SETTINGS.keys())
    if unknown:
        shown = ", ".join(f"{name}={conf[name]}" for name in unknown)
        raise UnsupportedCheckpoint(
            f"{where}: Spark pinned settings this daemon does not know ({shown}): the state of "
            f"this epoch may be written in a way it cannot read, so it is not served"
        )
