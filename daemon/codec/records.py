"""The form in which the daemon stores and serves a state row: ``epochstate.v1.Record``.

Ingest converts each decoded (key, value) once into a serialized ``Record``; the
store keeps those bytes as the version's payload; reads frame the stored bytes
into responses without decoding them. Conversion is deterministic: the same
decoded row always yields the same bytes, which is what makes a pinned read
byte-identical however often it is asked.

The encoders write protobuf wire format directly (field numbers from
``epochstate.proto``), compiled once per schema: building message objects per
row cost several times more on the ingest path. ``tests/test_records.py`` checks
that what they write parses to the messages the schema implies.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterable
from typing import Any

from epochstate.core.sparktypes import (
    ArrayType,
    AtomicType,
    DecimalType,
    MapType,
    SparkType,
    StructType,
)

Encoder = Callable[[Any], bytes]

_MASK64 = (1 << 64) - 1
_SMALL = [bytes((n,)) for n in range(128)]
_DOUBLE = struct.Struct("<d")


def varint(n: int) -> bytes:
    """Protobuf base-128 varint of a non-negative integer."""
    if n < 128:
        return _SMALL[n]
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _int64(n: int) -> bytes:
    return varint(n & _MASK64)


def _zigzag(n: int) -> bytes:
    return varint(((n << 1) ^ (n >> 63)) & _MASK64)


def _length_delimited(tag: bytes, payload: bytes) -> bytes:
    return tag + varint(len(payload)) + payload


# Value's fields: null=1 bool=2 int=3 (sint64) float=4 (double) decimal=5 string=6
# binary=7 date=8 (int32) timestamp_micros=9 (int64) struct=10 array=11 map=12.
_NULL = b"\x08\x01"
_TRUE = b"\x10\x01"
_FALSE = b"\x10\x00"


def _atomic(name: str) -> Encoder:
    if name in ("byte", "short", "integer", "long"):
        return lambda v: b"\x18" + _zigzag(v)
    if name in ("float", "double"):
        return lambda v: b"\x21" + _DOUBLE.pack(v)
    if name == "boolean":
        return lambda v: _TRUE if v else _FALSE
    if name == "string":
        return lambda v: _length_delimited(b"\x32", v.encode("utf-8"))
    if name == "binary":
        return lambda v: _length_delimited(b"\x3a", bytes(v))
    if name == "date":
        return lambda v: b"\x40" + _int64(v)
    if name in ("timestamp", "timestamp_ntz"):
        return lambda v: b"\x48" + _int64(v)
    return lambda v: _NULL


def _nullable(encode: Encoder) -> Encoder:
    return lambda v: _NULL if v is None else encode(v)


def value_encoder(t: SparkType) -> Encoder:
    """Bytes of the ``Value`` message for a decoded value of type ``t``."""
    if isinstance(t, AtomicType):
        return _nullable(_atomic(t.name))
    if isinstance(t, DecimalType):
        return _nullable(lambda v: _length_delimited(b"\x2a", str(v).encode()))
    if isinstance(t, StructType):
        row = row_encoder(t)
        return _nullable(lambda v: _length_delimited(b"\x52", row(v)))
    if isinstance(t, ArrayType):
        element = value_encoder(t.element)
        return _nullable(
            lambda v: _length_delimited(b"\x5a", b"".join(_length_delimited(b"\x0a", element(x)) for x in v))
        )
    assert isinstance(t, MapType)
    key, value = value_encoder(t.key), value_encoder(t.value)

    def map_value(v: Any) -> bytes:
        keys = b"".join(_length_delimited(b"\x0a", key(k)) for k, _ in v.entries)
        values = b"".join(_length_delimited(b"\x12", value(x)) for _, x in v.entries)
        return _length_delimited(b"\x62", keys + values)

    return _nullable(map_value)


def row_encoder(schema: StructType) -> Callable[[tuple[Any, ...]], bytes]:
    """Bytes of the ``Row`` message for a decoded struct of ``schema``."""
    fields = [value_encoder(f.type) for f in schema.fields]

    def row(values: tuple[Any, ...]) -> bytes:
        return b"".join(
            [_length_delimited(b"\x0a", encode(v)) for encode, v in zip(fields, values, strict=True)]
        )

    return row


class RecordEncoder:
    """Serialized ``Record`` messages (key=1, value=2, found=3, partition=4) of one store."""

    def __init__(self, key_schema: StructType, value_schema: StructType) -> None:
        from epochstate.daemon.codec.record_compiler import compile_present

        self._key = row_encoder(key_schema)
        self._value = row_encoder(value_schema)
        # The same bytes as reference_present, written by code compiled for the schemas.
        self.present = compile_present(key_schema, value_schema)

    def reference_present(self, partition: int, key: tuple[Any, ...], value: tuple[Any, ...]) -> bytes:
        """:meth:`present` composed from the per-field closures (what it is checked against)."""
        return b"".join(
            (
                _length_delimited(b"\x0a", self._key(key)),
                _length_delimited(b"\x12", self._value(value)),
                b"\x18\x01",
                b"\x20" + _int64(partition) if partition else b"",
            )
        )

    def absent(self, key: tuple[Any, ...]) -> bytes:
        return _length_delimited(b"\x0a", self._key(key))


def response_bytes(epoch: int, records: Iterable[bytes], record_field: int = 2, token: bytes = b"") -> bytes:
    """Wire bytes of ``{int64 epoch = 1; repeated Record <record_field>; bytes token = 3}``."""
    tag = bytes([(record_field << 3) | 2])
    parts = [b"\x08", _int64(epoch)]
    for record in records:
        parts += (tag, varint(len(record)), record)
    if token:
        parts += (b"\x1a", varint(len(token)), token)
    return b"".join(parts)
