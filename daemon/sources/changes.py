"""What every state store reader yields: decoded changes of one partition."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, NamedTuple, Protocol

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


def decode_changes(
    partition: int,
    rows: Iterable[tuple[bytes, bytes | None]],
    keys: RowDecoder,
    values: RowDecoder,
    where: Path,
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
