"""Protobuf wire format of ``epochstate.v1.Value`` and ``Row``, one encoder per Spark type.

The encoders write the wire bytes directly (field numbers from ``epochstate.proto``):
building message objects per row cost several times more on the ingest path. They
are deterministic (the same decoded value always yields the same bytes) and are the
reference that the compiled writers (:mod:`record_compiler`, the ingest
transcoder) must equal byte for byte; ``tests/test_records.py`` checks that what
they write parses to the messages the schema implies.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
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


def int64(n: int) -> bytes:
    """Protobuf varint of an int64 (negative values as their two's complement)."""
    return varint(n & _MASK64)


def _zigzag(n: int) -> bytes:
    return varint(((n << 1) ^ (n >> 63)) & _MASK64)


def length_delimited(tag: bytes, payload: bytes) -> bytes:
    """A length-delimited field: ``tag``, the payload's length, the payload."""
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
        return lambda v: length_delimited(b"\x32", v.encode("utf-8"))
    if name == "binary":
        return lambda v: length_delimited(b"\x3a", bytes(v))
    if name == "date":
        return lambda v: b"\x40" + int64(v)
    if name in ("timestamp", "timestamp_ntz"):
        return lambda v: b"\x48" + int64(v)
    return lambda v: _NULL


def _nullable(encode: Encoder) -> Encoder:
    return lambda v: _NULL if v is None else encode(v)


def value_encoder(t: SparkType) -> Encoder:
    """Bytes of the ``Value`` message for a decoded value of type ``t``."""
    if isinstance(t, AtomicType):
        return _nullable(_atomic(t.name))
    if isinstance(t, DecimalType):
        return _nullable(lambda v: length_delimited(b"\x2a", str(v).encode()))
    if isinstance(t, StructType):
        row = row_encoder(t)
        return _nullable(lambda v: length_delimited(b"\x52", row(v)))
    if isinstance(t, ArrayType):
        element = value_encoder(t.element)
        return _nullable(
            lambda v: length_delimited(b"\x5a", b"".join(length_delimited(b"\x0a", element(x)) for x in v))
        )
    assert isinstance(t, MapType)
    key, value = value_encoder(t.key), value_encoder(t.value)

    def map_value(v: Any) -> bytes:
        keys = b"".join(length_delimited(b"\x0a", key(k)) for k, _ in v.entries)
        values = b"".join(length_delimited(b"\x12", value(x)) for _, x in v.entries)
        return length_delimited(b"\x62", keys + values)

    return _nullable(map_value)


def row_encoder(schema: StructType) -> Callable[[tuple[Any, ...]], bytes]:
    """Bytes of the ``Row`` message for a decoded struct of ``schema``."""
    fields = [value_encoder(f.type) for f in schema.fields]

    def row(values: tuple[Any, ...]) -> bytes:
        return b"".join(
            [length_delimited(b"\x0a", encode(v)) for encode, v in zip(fields, values, strict=True)]
        )

    return row
