"""The one interface of the state store readers, and the choice between them.

Both :class:`HdfsStoreReader` and :class:`RocksDBStoreReader` serve a store's
versions as :class:`StateChange` rows with the same guarantees, so the ingest
loop holds a :class:`StoreReader` and need not know which provider wrote the state.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Protocol, runtime_checkable

from epochstate.core.sparktypes import StructType
from epochstate.daemon.sources.changes import StateChange
from epochstate.daemon.sources.checkpoint.checkpoint import Checkpoint
from epochstate.daemon.sources.checkpoint.operators import StateVariable
from epochstate.daemon.sources.errors import UnsupportedCheckpoint
from epochstate.daemon.sources.hdfs_backed.provider import HdfsStoreReader
from epochstate.daemon.sources.rocksdb.conf import check_rocksdb_conf, merge_delimiter, state_encoding
from epochstate.daemon.sources.rocksdb.provider import RocksDBStoreReader
from epochstate.daemon.sources.tws.reader import StateVariableReader


class StoreReader(Protocol):
    """Reads the versions of one store; store version ``v`` is the state after epoch
    ``v - 1``. A version whose files exist reads the same every time.

    Errors: ``MissingStateFile`` (a file needed was purged or not written yet),
    ``CorruptStateFile`` (damaged, or not matching the schemas),
    ``UnsupportedCheckpoint`` (a format option the reader refuses).
    """

    num_partitions: int
    partitions: tuple[int, ...]
    """The partitions read, in order (all ``num_partitions`` unless the reader was
    given fewer): every method below reads, lists and asks about these only."""

    def has_delta(self, version: int) -> bool:
        """Whether :meth:`changes` of ``version`` can be read from the partitions' files."""
        ...

    def has_full(self, version: int) -> bool:
        """Whether each partition read has a snapshot of ``version`` itself, so
        :meth:`full_state` of it reads no file of an earlier version."""
        ...

    def changes(self, version: int) -> Iterator[StateChange]:
        """The changes ``version`` made: per partition read, each changed key once with its
        last operation (``value is None``: removed)."""
        ...

    def partition_changes(self, partition: int, version: int) -> Iterator[StateChange]:
        """:meth:`changes` of one partition."""
        ...

    def full_state(self, version: int) -> Iterator[StateChange]:
        """Every key present at ``version`` in the partitions read with its value,
        partition by partition."""
        ...

    def partition_state(self, partition: int, version: int) -> Iterator[StateChange]:
        """:meth:`full_state` of one partition."""
        ...


@runtime_checkable
class ReadsAhead(Protocol):
    """A :class:`StoreReader` that can start reading a version's files before
    :meth:`StoreReader.changes` asks for them (an object store's round trips overlap)."""

    def read_ahead(self, version: int) -> None: ...


def open_store_reader(
    checkpoint: Checkpoint,
    operator_id: int,
    store_name: str,
    num_partitions: int,
    key_schema: StructType,
    value_schema: StructType,
    epoch: int | None = None,
    *,
    scratch_dir: Path | None = None,
    partitions: Sequence[int] | None = None,
) -> StoreReader:
    """The reader for the provider that wrote the state as of ``epoch`` (``None``: the
    newest planned epoch), of the store's ``partitions`` (``None``: all; the files of
    the others are never read). ``scratch_dir`` is where RocksDB snapshots are opened. A
    transformWithState state variable gets a :class:`StateVariableReader` (the
    schemas given must be the ones :mod:`statevars` serves at ``epoch``, whose
    settings it is read with).

    Raises:
        UnsupportedCheckpoint: another provider, or a format option the reader refuses.
        MissingCheckpointFile: no offset log entry to read the configuration from.
    """
    variable = _state_variable(checkpoint, operator_id, store_name, epoch)
    if variable is not None:
        if checkpoint.provider_kind(epoch) != "rocksdb":
            raise UnsupportedCheckpoint(f"{checkpoint.root}: state variables outside the RocksDB provider")
        if (key_schema, value_schema) != (variable.key_schema, variable.value_schema):
            raise UnsupportedCheckpoint(
                f"{checkpoint.root}: operator {operator_id}'s state variable {store_name!r} changed schema"
            )
        codec = check_rocksdb_conf(checkpoint, epoch, avro=True)
        return StateVariableReader(
            checkpoint,
            operator_id,
            num_partitions,
            variable,
            codec,
            state_encoding(checkpoint, epoch),
            merge_delimiter=merge_delimiter(checkpoint, epoch),
            scratch_dir=scratch_dir,
            partitions=partitions,
        )
    if checkpoint.provider_kind(epoch) == "hdfs":
        checkpoint.ensure_hdfs_backed(epoch)
        return HdfsStoreReader(
            checkpoint,
            operator_id,
            store_name,
            num_partitions,
            key_schema,
            value_schema,
            partitions=partitions,
        )
    return RocksDBStoreReader(
        checkpoint,
        operator_id,
        store_name,
        num_partitions,
        key_schema,
        value_schema,
        scratch_dir=scratch_dir,
        partitions=partitions,
    )


def _state_variable(
    checkpoint: Checkpoint, operator_id: int, store_name: str, epoch: int | None
) -> StateVariable | None:
    for operator in checkpoint.operators(epoch):
        if operator.operator_id == operator_id:
            return next((s.variable for s in operator.stores if s.name == store_name), None)
    return None
