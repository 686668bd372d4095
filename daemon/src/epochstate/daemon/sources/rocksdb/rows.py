"""Keys and values as Spark's RocksDB state store encodes them (``unsaferow`` encoding).

Both in the database and in changelogs, a value is one version byte ``0`` followed
by the UnsafeRow. A key is the same, unless the store scans by a key prefix
(``numColsPrefixKey > 0``, e.g. session windows); then it is::

    int32 little-endian n | n bytes: 0, UnsafeRow of the first numColsPrefixKey fields
                          | 0, UnsafeRow of the remaining fields

(Stores with column families, transformWithState's, put a 2-byte column family id
in front; they are refused before any key gets here.)
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any

from epochstate.core.sparktypes import StructType
from epochstate.daemon.sources.errors import CorruptRow
from epochstate.daemon.sources.rows.unsaferow import RowDecoder

ENCODING_VERSION = 0
_PREFIX_SIZE = struct.Struct("<i")


class StateRowDecoder:
    """Decodes the key or value bytes of one store into tuples.

    ``num_cols_prefix_key`` is the store's (see :class:`operators.StoreInfo`); it must
    be 0 for values. Thread-safe (holds no mutable state).
    """

    __slots__ = ("decode", "num_cols_prefix_key")

    def __init__(self, schema: StructType, num_cols_prefix_key: int = 0) -> None:
        if not 0 <= num_cols_prefix_key <= len(schema.fields):
            raise ValueError(f"{num_cols_prefix_key} prefix columns of {len(schema.fields)}")
        self.num_cols_prefix_key = num_cols_prefix_key
        self.decode: Callable[[bytes], tuple[Any, ...]]
        """The row's values in schema order.

        Raises:
            CorruptRow: a wrong version byte or prefix size, or rows that do not fit
                the schema.
        """
        if num_cols_prefix_key == 0:
            self.decode = _plain_reader(RowDecoder(schema).decode)
        else:
            self.decode = _prefixed_reader(
                RowDecoder(StructType(schema.fields[:num_cols_prefix_key])).decode,
                RowDecoder(StructType(schema.fields[num_cols_prefix_key:])).decode,
            )


# Closures rather than methods: this runs once per key and value on the ingest path.


def _plain_reader(row: Callable[[bytes], tuple[Any, ...]]) -> Callable[[bytes], tuple[Any, ...]]:
    def decode(data: bytes) -> tuple[Any, ...]:
        if not data or data[0] != ENCODING_VERSION:
            raise CorruptRow(f"state row starts with {data[:1].hex() or 'nothing'}, not version 0")
        return row(data[1:])

    return decode


def _prefixed_reader(
    prefix: Callable[[bytes], tuple[Any, ...]], rest: Callable[[bytes], tuple[Any, ...]]
) -> Callable[[bytes], tuple[Any, ...]]:
    unpack = _PREFIX_SIZE.unpack_from

    def decode(data: bytes) -> tuple[Any, ...]:
        if len(data) < 4:
            raise CorruptRow(f"prefix-scan key of {len(data)} bytes")
        (size,) = unpack(data, 0)
        end = 4 + size
        if size < 1 or end + 1 > len(data) or data[4] != ENCODING_VERSION or data[end] != ENCODING_VERSION:
            raise CorruptRow(f"prefix-scan key of {len(data)} bytes with a prefix of {size}")
        return prefix(data[5:end]) + rest(data[end + 1 :])

    return decode
