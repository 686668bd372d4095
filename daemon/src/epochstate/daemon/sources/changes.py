"""What every state store reader yields: decoded changes of one partition."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple, Protocol

from epochstate.core.storage.location import Location
from epochstate.daemon.sources.errors import CorruptRow, CorruptStateFile


class RowDecoder(Protocol):
    """Turns a stored row into its decoded tuple; raises CorruptRow."""

    def decode(self, buf: bytes) -> tuple[Any, ...]: ...


class StateChange(NamedTuple):
    """The last operation on a key in a partition: a put of ``value``, or a removal
    when ``value`` is ``None``. Keys and values are decoded rows (tuples)."""

    partition: int
    key: tuple[Any, ...]
    value: tuple[Any, ...] | None


class RawRows(NamedTuple):
    """One partition's rows as the provider stored them, not decoded: each key once,
    ``value`` ``None`` for a removal. ``where`` names the file(s) for errors."""

    partition: int
    rows: Iterable[tuple[bytes, bytes | None]]
    where: Location | Path


@dataclass(frozen=True, slots=True)
class RowFraming:
    """How a provider stores a row around its UnsafeRow: RocksDB puts a version byte
    ``0`` in front (``version_byte``) and splits prefix-scan keys in two rows
    (``num_cols_prefix_key > 0``); HDFS-backed state files store the bare row."""

    version_byte: bool = False
    num_cols_prefix_key: int = 0


def decode_changes(
    partition: int,
    rows: Iterable[tuple[bytes, bytes | None]],
    keys: RowDecoder,
    values: RowDecoder,
    where: Location | Path,
) -> Iterator[StateChange]:
    """Decode raw (key, value-or-None) UnsafeRow pairs of one partition.

    Raises CorruptStateFile, naming ``where``, when a row does not fit its schema.
    """
    key, value_of = keys.decode, values.decode
    try:
        for raw_key, raw_value in rows:
            yield StateChange(partition, key(raw_key), None if raw_value is None else value_of(raw_value))
    except CorruptRow as err:
        raise CorruptStateFile(f"{where}: {err}") from err
