"""The form in which the daemon stores and serves a state row: ``epochstate.v1.Record``.

Ingest converts each decoded (key, value) once into a serialized ``Record``; the
store keeps those bytes as the version's payload; reads frame the stored bytes
into responses without decoding them. Conversion is deterministic: the same
decoded row always yields the same bytes, which is what makes a pinned read
byte-identical however often it is asked.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from epochstate.daemon.sources.sparktypes import (
    ArrayType,
    AtomicType,
    DecimalType,
    SparkType,
    StructType,
)
from epochstate.v1 import epochstate_pb2 as pb

_INTEGRAL = frozenset({"byte", "short", "integer", "long"})

ToProto = Callable[[Any], pb.Value]


def _null() -> pb.Value:
    return pb.Value(null=True)


def converter(t: SparkType) -> ToProto:
    """A function turning a decoded value of type ``t`` into a Value message."""
    if isinstance(t, AtomicType):
        name = t.name
        if name in _INTEGRAL:
            return lambda v: _null() if v is None else pb.Value(int=v)
        if name in ("float", "double"):
            return lambda v: _null() if v is None else pb.Value(float=v)
        if name == "boolean":
            return lambda v: _null() if v is None else pb.Value(bool=v)
        if name == "string":
            return lambda v: _null() if v is None else pb.Value(string=v)
        if name == "binary":
            return lambda v: _null() if v is None else pb.Value(binary=bytes(v))
        if name == "date":
            return lambda v: _null() if v is None else pb.Value(date=v)
        if name in ("timestamp", "timestamp_ntz"):
            return lambda v: _null() if v is None else pb.Value(timestamp_micros=v)
        return lambda v: _null()
    if isinstance(t, DecimalType):
        return lambda v: _null() if v is None else pb.Value(decimal=str(v))
    if isinstance(t, StructType):
        fields = [converter(f.type) for f in t.fields]

        def struct_value(v: Any) -> pb.Value:
            if v is None:
                return _null()
            return pb.Value(struct=pb.Row(fields=[c(x) for c, x in zip(fields, v, strict=True)]))

        return struct_value
    if isinstance(t, ArrayType):
        element = converter(t.element)
        return lambda v: _null() if v is None else pb.Value(array=pb.Array(elements=[element(x) for x in v]))
    key_c, value_c = converter(t.key), converter(t.value)

    def map_value(v: Any) -> pb.Value:
        if v is None:
            return _null()
        return pb.Value(
            map=pb.Map(keys=[key_c(k) for k, _ in v.entries], values=[value_c(x) for _, x in v.entries])
        )

    return map_value


class RowConverter:
    """Converts decoded rows of one struct schema to ``Row`` messages (compiled once)."""

    def __init__(self, schema: StructType) -> None:
        self._fields = [converter(f.type) for f in schema.fields]

    def __call__(self, row: tuple[Any, ...]) -> pb.Row:
        return pb.Row(fields=[c(x) for c, x in zip(self._fields, row, strict=True)])


class RecordEncoder:
    """Serialized ``Record`` messages for the rows of one store."""

    def __init__(self, key_schema: StructType, value_schema: StructType) -> None:
        self._key = RowConverter(key_schema)
        self._value = RowConverter(value_schema)

    def present(self, partition: int, key: tuple[Any, ...], value: tuple[Any, ...]) -> bytes:
        record = pb.Record(key=self._key(key), value=self._value(value), found=True, partition=partition)
        return record.SerializeToString(deterministic=True)

    def absent(self, key: tuple[Any, ...]) -> bytes:
        return pb.Record(key=self._key(key), found=False).SerializeToString(deterministic=True)


# -- framing stored records into responses (protobuf wire format) -------------------


def varint(n: int) -> bytes:
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _int64(n: int) -> bytes:
    return varint(n & 0xFFFFFFFFFFFFFFFF)


def response_bytes(epoch: int, records: Iterable[bytes], record_field: int = 2, token: bytes = b"") -> bytes:
    """Wire bytes of a response ``{int64 epoch = 1; repeated Record <record_field>; bytes token = 3}``."""
    tag = bytes([(record_field << 3) | 2])
    parts = [b"\x08", _int64(epoch)]
    for record in records:
        parts += (tag, varint(len(record)), record)
    if token:
        parts += (b"\x1a", varint(len(token)), token)
    return b"".join(parts)
