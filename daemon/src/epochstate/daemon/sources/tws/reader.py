"""Reading one state variable of a transformWithState operator as a store.

The variable's rows are the keys of its column family in the operator's physical
store (see :mod:`tws_store`), decoded to the schemas :mod:`statevars` serves:

* value state: key = the grouping key, value = the value;
* list state: key = the grouping key; the stored value is the list's elements, each
  ``int32 little-endian size | encoded element``, joined by RocksDB's string-append
  merge (``appendValue`` is a merge record) with ``,`` or, under Spark's merge
  operator version 2, nothing (see :mod:`rocksdb_conf`); served as one row
  ``(list_value,)``;
* map state and timers: a prefix-scan key, grouping key then the map's user key or
  the timer's expiry (see :mod:`rocksdb_rows`); a timer's value is a dummy row.

Rows are encoded with the operator's state encoding: ``unsaferow`` (a version byte
and an UnsafeRow) or ``avro`` (see :mod:`avro_rows`).
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

from epochstate.daemon.sources.changes import StateChange
from epochstate.daemon.sources.checkpoint.checkpoint import Checkpoint
from epochstate.daemon.sources.checkpoint.operators import LIST, TIMERS, StateVariable
from epochstate.daemon.sources.errors import CorruptRow, CorruptStateFile
from epochstate.daemon.sources.rocksdb.rows import StateRowDecoder
from epochstate.daemon.sources.rocksdb.store_files import LIST_DELIMITER, StoreFiles
from epochstate.daemon.sources.rows.avro import AvroStateDecoder
from epochstate.daemon.sources.tws.store import ColumnFamilyStore, shared_store

Decode = Callable[[bytes], tuple[Any, ...]]
_SIZE = struct.Struct("<i")
UNSAFEROW, AVRO = "unsaferow", "avro"


def split_list(raw: bytes, delimiter: bytes = LIST_DELIMITER) -> list[bytes]:
    """The encoded elements of a stored list value, joined by ``delimiter``.

    Raises:
        CorruptRow: sizes that do not add up, or a missing delimiter.
    """
    elements = []
    pos, total = 0, len(raw)
    while True:
        if pos + 4 > total:
            raise CorruptRow(f"list value of {total} bytes: element header at {pos} is cut off")
        (size,) = _SIZE.unpack_from(raw, pos)
        end = pos + 4 + size
        if size < 0 or end > total:
            raise CorruptRow(f"list value of {total} bytes: element of {size} bytes at {pos}")
        elements.append(raw[pos + 4 : end])
        if end == total:
            return elements
        if raw[end : end + len(delimiter)] != delimiter:
            raise CorruptRow(f"list value of {total} bytes: no delimiter at {end}")
        pos = end + len(delimiter)


def _decoders(variable: StateVariable, encoding: str, delimiter: bytes) -> tuple[Decode, Decode]:
    family = variable.family
    keys: Decode
    element: Decode
    if encoding == AVRO:
        avro = AvroStateDecoder(family)
        keys, element = avro.key, avro.value
    else:
        keys = StateRowDecoder(family.key_schema, family.num_cols_prefix_key).decode
        element = StateRowDecoder(family.value_schema).decode
    if variable.kind == LIST:

        def values(raw: bytes) -> tuple[Any, ...]:
            return ([element(e) for e in split_list(raw, delimiter)],)

        return keys, values
    if variable.kind == TIMERS:
        return keys, lambda raw: ()
    return keys, element


class StateVariableReader:
    """A :class:`StoreReader` over one state variable, with the same guarantees as
    :class:`RocksDBStoreReader`. Readers of one operator share its
    :class:`ColumnFamilyStore`."""

    def __init__(
        self,
        checkpoint: Checkpoint,
        operator_id: int,
        num_partitions: int,
        variable: StateVariable,
        codec: str,
        encoding: str,
        *,
        merge_delimiter: bytes = LIST_DELIMITER,
        scratch_dir: Path | None = None,
        partitions: Sequence[int] | None = None,
    ) -> None:
        files = StoreFiles(
            checkpoint,
            operator_id,
            variable.physical_store,
            codec,
            column_families=True,
            merge_delimiter=merge_delimiter,
            scratch_dir=scratch_dir,
        )
        self.num_partitions = num_partitions
        self.partitions = tuple(range(num_partitions)) if partitions is None else tuple(partitions)
        self.variable = variable
        self._store: ColumnFamilyStore = shared_store(files)
        self._keys, self._values = _decoders(variable, encoding, merge_delimiter)

    def _decoded(
        self, partition: int, prefix: bytes, rows: Iterable[tuple[bytes, bytes | None]]
    ) -> Iterator[StateChange]:
        skip, keys, values = len(prefix), self._keys, self._values
        try:
            # Decoded whole: the shared raw state may move on once this returns.
            decoded = [
                StateChange(partition, keys(k[skip:]), None if v is None else values(v))
                for k, v in rows
                if k.startswith(prefix)
            ]
        except CorruptRow as err:
            where = self._store.files.directory.dir(partition)
            raise CorruptStateFile(f"{where}: column family {self.variable.family.name!r}: {err}") from err
        return iter(decoded)

    def has_delta(self, version: int) -> bool:
        return self._store.files.has_delta(version, self.partitions)

    def has_full(self, version: int) -> bool:
        return self._store.files.has_full(version, self.partitions)

    def partition_changes(self, partition: int, version: int) -> Iterator[StateChange]:
        """The variable's changes in one partition at ``version``: each touched key
        once, with its value at ``version`` or as a removal.

        Raises:
            MissingStateFile, CorruptStateFile, UnsupportedCheckpoint: as for
                :meth:`ColumnFamilyStore.delta` and :meth:`ColumnFamilyStore.family_prefix`.
        """
        keys, state = self._store.delta(partition, version)
        if not keys:
            return iter(())
        prefix = self._store.family_prefix(partition, self.variable.family.name)
        return self._decoded(partition, prefix, ((k, state.get(k)) for k in keys))

    def changes(self, version: int) -> Iterator[StateChange]:
        for partition in self.partitions:
            yield from self.partition_changes(partition, version)

    def partition_state(self, partition: int, version: int) -> Iterator[StateChange]:
        """Every key of the variable in one partition at ``version``.

        Raises:
            ValueError, MissingStateFile, CorruptStateFile, UnsupportedCheckpoint: as
                for :meth:`ColumnFamilyStore.state`.
        """
        state = self._store.state(partition, version)
        if not state:
            return iter(())
        prefix = self._store.family_prefix(partition, self.variable.family.name)
        return self._decoded(partition, prefix, state.items())

    def full_state(self, version: int) -> Iterator[StateChange]:
        for partition in self.partitions:
            yield from self.partition_state(partition, version)
