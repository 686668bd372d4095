"""State rows in the Avro state encoding (``spark.sql.streaming.stateStore.encodingFormat=avro``).

Spark 4.0 offers it for transformWithState only. In the RocksDB store, after the
column family id:

* a value, or a key without prefix scan: ``0x00 | int16 schema id | Avro datum``;
* a prefix-scan key: ``int32 little-endian n | n bytes: 0x00 | Avro datum of the
  prefix columns`` then ``0x00 | int16 schema id | Avro datum of the other columns``.

The schema id (little-endian) is the column family's key or value schema id in the
v3 schema file. A datum is Avro binary of the struct as a record whose every field
is the union ``[null, T]`` (branch 0: null; branch 1: the value), whatever the
field's nullability; a ``void`` field takes no bytes. Inside an array or a map, an
element that is a struct, an array or a map is such a union too; any other element
is written bare (its Avro schema has no null). Arrays and maps are Avro blocks (a
count, negated when a byte size follows; a count of 0 ends them); map keys are
strings (the only keys Spark's Avro conversion accepts). A decimal is a fixed of
the fewest bytes that hold its precision, its unscaled value big-endian two's
complement. Values decode to the
same Python values as :mod:`unsaferow` gives (dates as days, timestamps as
microseconds, decimals as :class:`decimal.Decimal`, maps as :class:`MapValue`).
"""

from __future__ import annotations

import decimal
import struct
from collections.abc import Callable
from typing import Any

from epochstate.core.sparktypes import (
    ArrayType,
    AtomicType,
    DecimalType,
    MapType,
    MapValue,
    SparkType,
    StructType,
)
from epochstate.daemon.sources.checkpoint.schemafile import PREFIX_SCAN, ColumnFamilySchema
from epochstate.daemon.sources.errors import CorruptRow, UnsupportedCheckpoint

# Reads one datum at ``pos`` of ``buf``; returns it and the position after it.
Reader = Callable[[bytes, int], tuple[Any, int]]
# Reads the struct datum from ``pos`` to the end of ``buf``.
Datum = Callable[[bytes, int], tuple[Any, ...]]
_FLOAT = struct.Struct("<f")
_DOUBLE = struct.Struct("<d")
_SIZE = struct.Struct("<i")
_SCHEMA_ID = struct.Struct("<h")
_INTEGRAL = frozenset({"byte", "short", "integer", "long", "date", "timestamp", "timestamp_ntz"})


def _varlong(buf: bytes, pos: int) -> tuple[int, int]:
    shift = result = 0
    while True:
        if pos >= len(buf):
            raise CorruptRow(f"Avro datum cut off at byte {pos}")
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return (result >> 1) ^ -(result & 1), pos
        shift += 7
        if shift > 63:
            raise CorruptRow(f"Avro varint too long at byte {pos}")


def _take(buf: bytes, pos: int) -> tuple[bytes, int]:
    size, pos = _varlong(buf, pos)
    end = pos + size
    if size < 0 or end > len(buf):
        raise CorruptRow(f"Avro bytes of size {size} at byte {pos} overrun the datum")
    return buf[pos:end], end


def _fixed(unpacker: struct.Struct) -> Reader:
    width = unpacker.size

    def read(buf: bytes, pos: int) -> tuple[Any, int]:
        if pos + width > len(buf):
            raise CorruptRow(f"Avro datum cut off at byte {pos}")
        return unpacker.unpack_from(buf, pos)[0], pos + width

    return read


def _string(buf: bytes, pos: int) -> tuple[Any, int]:
    raw, pos = _take(buf, pos)
    try:
        return raw.decode("utf-8"), pos
    except UnicodeDecodeError as err:
        raise CorruptRow(f"Avro string is not UTF-8: {err}") from err


def _boolean(buf: bytes, pos: int) -> tuple[Any, int]:
    if pos >= len(buf):
        raise CorruptRow(f"Avro datum cut off at byte {pos}")
    return buf[pos] != 0, pos + 1


def _null(buf: bytes, pos: int) -> tuple[Any, int]:
    return None, pos


def _reader(t: SparkType) -> Reader:
    if isinstance(t, StructType):
        return _record(t)
    if isinstance(t, DecimalType):
        return _decimal(t)
    if isinstance(t, ArrayType):
        return _blocks(_element(t.element), list)
    if isinstance(t, MapType):
        if t.key != AtomicType("string"):
            raise UnsupportedCheckpoint(f"Avro state encoding of {t}: Spark writes only string map keys")
        value = _element(t.value)

        def entry(buf: bytes, pos: int) -> tuple[Any, int]:
            key, pos = _string(buf, pos)
            item, pos = value(buf, pos)
            return (key, item), pos

        return _blocks(entry, lambda items: MapValue(tuple(items)))
    if isinstance(t, AtomicType):
        if t.name in _INTEGRAL:
            return _varlong
        simple: dict[str, Reader] = {
            "boolean": _boolean,
            "float": _fixed(_FLOAT),
            "double": _fixed(_DOUBLE),
            "string": _string,
            "binary": _take,
            "null": _null,
        }
        if t.name in simple:
            return simple[t.name]
    raise UnsupportedCheckpoint(f"Avro state encoding of {t} is not readable")


def decimal_width(precision: int) -> int:
    """Bytes of the Avro fixed Spark writes a decimal of ``precision`` as."""
    return next(n for n in range(1, 18) if 2 ** (8 * n - 1) >= 10**precision)


def _decimal(t: DecimalType) -> Reader:
    width = decimal_width(t.precision)
    context = decimal.Context(prec=80)

    def read(buf: bytes, pos: int) -> tuple[Any, int]:
        end = pos + width
        if end > len(buf):
            raise CorruptRow(f"Avro decimal cut off at byte {pos}")
        unscaled = int.from_bytes(buf[pos:end], "big", signed=True)
        return decimal.Decimal(unscaled).scaleb(-t.scale, context), end

    return read


def _element(t: SparkType) -> Reader:
    """An array element or map value: nested structs, arrays and maps are nullable
    unions, other types are not."""
    if not isinstance(t, (StructType, ArrayType, MapType)):
        return _reader(t)
    inner = _reader(t)

    def read(buf: bytes, pos: int) -> tuple[Any, int]:
        branch, pos = _varlong(buf, pos)
        if branch == 0:
            return None, pos
        if branch != 1:
            raise CorruptRow(f"Avro union branch {branch} of a nullable element")
        return inner(buf, pos)

    return read


def _blocks(item: Reader, build: Callable[[list[Any]], Any]) -> Reader:
    def read(buf: bytes, pos: int) -> tuple[Any, int]:
        items: list[Any] = []
        while True:
            count, pos = _varlong(buf, pos)
            if count == 0:
                return build(items), pos
            if count < 0:
                count = -count
                _, pos = _varlong(buf, pos)  # the block's byte size
            if count > len(buf) - pos:
                raise CorruptRow(f"Avro block of {count} items at byte {pos} overruns the datum")
            for _ in range(count):
                value, pos = item(buf, pos)
                items.append(value)

    return read


def _record(schema: StructType) -> Reader:
    fields = [(f.type == AtomicType("null"), _reader(f.type)) for f in schema.fields]

    def read(buf: bytes, pos: int) -> tuple[Any, int]:
        values: list[Any] = []
        for is_void, field in fields:
            if is_void:
                values.append(None)
                continue
            branch, pos = _varlong(buf, pos)
            if branch == 0:
                values.append(None)
            elif branch == 1:
                value, pos = field(buf, pos)
                values.append(value)
            else:
                raise CorruptRow(f"Avro union branch {branch} of a nullable field")
        return tuple(values), pos

    return read


def read_datum(schema: StructType) -> Datum:
    """The reader of one whole Avro datum of a struct of ``schema``, in Spark's Avro
    form, from ``pos`` to the end of ``buf``.

    Raises on construction:
        UnsupportedCheckpoint: a type whose Avro form is not read.
    The reader raises CorruptRow for bytes that do not fit, or bytes after the datum.
    """
    return _whole(_record(schema))


def _whole(read: Reader) -> Datum:
    def decode(buf: bytes, pos: int) -> tuple[Any, ...]:
        value, end = read(buf, pos)
        if end != len(buf):
            raise CorruptRow(f"{len(buf) - end} bytes after the Avro datum")
        return tuple(value)

    return decode


def _resolver(writer: SparkType, reader: SparkType) -> Callable[[Any], Any] | None:
    """How a value decoded with ``writer`` becomes one of ``reader``, as Avro schema
    resolution does: struct fields matched by name, a field the writer lacks is null,
    one the reader lacks is dropped. None: the value stays as decoded."""
    if isinstance(writer, StructType) and isinstance(reader, StructType):
        positions = {f.name: i for i, f in enumerate(writer.fields)}
        steps: list[tuple[int | None, Callable[[Any], Any] | None]] = []
        for f in reader.fields:
            at = positions.get(f.name)
            steps.append((at, None if at is None else _resolver(writer.fields[at].type, f.type)))
        if [at for at, _ in steps] == list(range(len(writer.fields))) and all(s is None for _, s in steps):
            return None

        def struct_value(value: Any) -> Any:
            if value is None:
                return None
            return tuple(
                None if at is None else (value[at] if step is None else step(value[at])) for at, step in steps
            )

        return struct_value
    if isinstance(writer, ArrayType) and isinstance(reader, ArrayType):
        element = _resolver(writer.element, reader.element)
        if element is None:
            return None
        return lambda value: None if value is None else [element(v) for v in value]
    if isinstance(writer, MapType) and isinstance(reader, MapType):
        item = _resolver(writer.value, reader.value)
        if item is None:
            return None
        return lambda value: (
            None if value is None else MapValue(tuple((k, item(v)) for k, v in value.entries))
        )
    return None


def resolving_datum(writer: StructType, reader: StructType, datum: Callable[[StructType], Datum]) -> Datum:
    """The reader of a datum written with ``writer``, as a struct of ``reader``."""
    read = datum(writer)
    resolve = _resolver(writer, reader)
    if resolve is None:
        return read
    return lambda buf, pos: tuple(resolve(read(buf, pos)))


class AvroStateDecoder:
    """Decodes the keys (after the column family id) and values of one column family.

    Spark's framing around the Avro datums (version byte, schema id, the halves of a
    prefix-scan key) is read here; ``datum`` makes the reader of one datum of a
    struct schema, with the contract of :func:`read_datum`, which it defaults to:
    on the rows of state variables (a few fields) it decodes faster than
    ``fastavro.schemaless_reader``, whose per-call cost dominates there; fastavro
    only draws level on rows of a dozen nested fields (``bench/avro_decode.py``).

    Raises on construction:
        UnsupportedCheckpoint: a type whose Avro form is not read (see the module docstring).
    A row written with another schema id of the family (``written_keys`` and
    ``written_values``: an older run's schema) is decoded with that schema and
    resolved to the family's by field name, as Spark's reader does.
    ``key`` and ``value`` raise CorruptRow for bytes that do not fit, and
    UnsupportedCheckpoint for rows written with a schema id of no known schema.
    """

    def __init__(self, family: ColumnFamilySchema, datum: Callable[[StructType], Datum] = read_datum) -> None:
        self.family = family
        self._datum = datum
        self._values: dict[int, Datum] = {family.value_schema_id: datum(family.value_schema)}
        fields = family.key_schema.fields
        self._prefix_cols = prefix_cols = family.num_cols_prefix_key if family.encoder == PREFIX_SCAN else 0
        self._prefix = datum(StructType(fields[:prefix_cols])) if prefix_cols else None
        self._rests: dict[int, Datum] = {family.key_schema_id: datum(StructType(fields[prefix_cols:]))}

    def _rest_of(self, key: StructType) -> StructType:
        return StructType(key.fields[self._prefix_cols :])

    def _body(self, data: bytes, pos: int, known: dict[int, Datum], what: str) -> tuple[Datum, int]:
        if len(data) < pos + 3 or data[pos] != 0:
            raise CorruptRow(f"Avro {what} row does not start with version 0")
        (written,) = _SCHEMA_ID.unpack_from(data, pos + 1)
        read = known.get(written)
        if read is None:
            read = known[written] = self._older(written, what)
        return read, pos + 3

    def _older(self, written: int, what: str) -> Datum:
        f = self.family
        history, current = (
            (f.written_values, f.value_schema) if what == "value" else (f.written_keys, f.key_schema)
        )
        writer = dict(history).get(written)
        if writer is None:
            raise UnsupportedCheckpoint(
                f"column family {f.name!r}: a {what} written with schema id {written}, "
                f"of which no state schema file has the schema"
            )
        if what == "value":
            return resolving_datum(writer, current, self._datum)
        return resolving_datum(self._rest_of(writer), self._rest_of(current), self._datum)

    def value(self, data: bytes) -> tuple[Any, ...]:
        read, pos = self._body(data, 0, self._values, "value")
        return read(data, pos)

    def key(self, data: bytes) -> tuple[Any, ...]:
        if self._prefix is None:
            read, pos = self._body(data, 0, self._rests, "key")
            return read(data, pos)
        if len(data) < 5:
            raise CorruptRow(f"prefix-scan key of {len(data)} bytes")
        (size,) = _SIZE.unpack_from(data, 0)
        end = 4 + size
        if size < 1 or end > len(data) or data[4] != 0:
            raise CorruptRow(f"prefix-scan key of {len(data)} bytes with a prefix of {size}")
        prefix = self._prefix(data[:end], 5)
        read, pos = self._body(data, end, self._rests, "key")
        return prefix + read(data, pos)
