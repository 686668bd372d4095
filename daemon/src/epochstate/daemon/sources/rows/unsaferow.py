"""Decoding of Spark's ``UnsafeRow`` bytes into the Python values of :mod:`sparktypes`.

Layout (all little-endian), offsets in "word" slots relative to the start of the
enclosing row or array:

* **Row** of ``n`` fields: a null bitset of ``ceil(n / 64)`` 8-byte words (bit ``i``
  set: field ``i`` is null), then one 8-byte slot per field. Fixed-width values sit
  in the low bytes of their slot (boolean/byte 1, short 2, int/date/float 4,
  long/timestamp/double 8; a decimal of precision <= 18 as its unscaled long).
  Every other value lives after the slots and its slot holds
  ``(offset << 32) | size``, the offset counted from the row's first byte:
  strings (UTF-8), binary, decimals of precision > 18 (big-endian two's
  complement unscaled value), structs (a nested row), arrays, maps.
* **Array** of ``n`` elements: an int64 ``n``, a null bitset of ``ceil(n / 64)``
  words, then ``n`` elements of 1/2/4/8 bytes for primitive element types (a
  small decimal takes 8), or ``n`` 8-byte ``(offset << 32) | size`` slots,
  offsets counted from the array's first byte.
* **Map**: an int64 byte size of the key array, the key array, the value array.

A :class:`RowDecoder` compiles a schema once: each row is one
``struct.unpack_from`` of its bitset and slots, plus converters for just the
fields that need one. For rows without nulls (the common case) the reader is a
generated function without loops (made by :mod:`~epochstate.daemon.codec.codegen`);
rows with nulls take a general path.
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
    MapValue,
    SparkType,
    StructType,
    type_to_simple_string,
)
from epochstate.daemon.codec.codegen import FunctionSource
from epochstate.daemon.sources.errors import CorruptRow

# A converter turns the raw slot (or array element) ``word`` of a container that
# starts at ``base`` in ``buf`` into the Python value. Never called for nulls.
Converter = Callable[[bytes, int, Any], Any]
# Decodes the row starting at ``base`` in ``buf``.
RowReader = Callable[[bytes, int], tuple[Any, ...]]
# Decodes the array at ``[base, base + size)`` of ``buf``.
ArrayReader = Callable[[bytes, int, int], list[Any]]

# Large enough for any Spark decimal (precision <= 38), so scaling never rounds.
_DECIMAL_CONTEXT = decimal.Context(prec=80)
_LOW32 = 0xFFFFFFFF
_INT64 = struct.Struct("<q")

# Slot formats of fixed-width fields inside a row (value in the low bytes).
_ROW_SLOT = {
    "boolean": "?7x",
    "byte": "b7x",
    "short": "h6x",
    "integer": "i4x",
    "date": "i4x",
    "float": "f4x",
    "long": "q",
    "timestamp": "q",
    "timestamp_ntz": "q",
    "double": "d",
    "null": "q",
}
# Element formats of primitive arrays (each element takes exactly its size).
_ARRAY_ELEMENT = {
    "boolean": "?",
    "byte": "b",
    "short": "h",
    "integer": "i",
    "date": "i",
    "float": "f",
    "long": "q",
    "timestamp": "q",
    "timestamp_ntz": "q",
    "double": "d",
}


class _OutOfBounds(Exception):
    """A slot points outside the row's bytes (turned into :class:`CorruptRow`)."""


class RowDecoder:
    """Decodes UnsafeRows of one struct schema into tuples.

    Build one per schema and reuse it; construction compiles the schema.
    Thread-safe (holds no mutable state).
    """

    __slots__ = ("_read", "schema")

    def __init__(self, schema: StructType) -> None:
        self.schema = schema
        self._read = _row_reader(schema)

    def decode(self, buf: bytes | memoryview) -> tuple[Any, ...]:
        """Return the row's field values in schema order (see :mod:`sparktypes`).

        Raises:
            CorruptRow: the bytes are too short for the schema, a variable-width
                value points outside them, or an array/map header is impossible.
        """
        data = buf if isinstance(buf, bytes) else bytes(buf)
        try:
            return self._read(data, 0)
        except (struct.error, _OutOfBounds, IndexError, ValueError, OverflowError) as err:
            raise CorruptRow(
                f"UnsafeRow of {len(data)} bytes does not match schema: {err or type(err).__name__}"
            ) from err


def _span(buf: bytes, base: int, word: int) -> tuple[int, int]:
    start = base + (word >> 32)
    end = start + (word & _LOW32)
    if end > len(buf):
        raise _OutOfBounds(f"value at [{start}, {end}) beyond {len(buf)} bytes")
    return start, end


def _decimal_from_unscaled(scale: int) -> Callable[[int], decimal.Decimal]:
    if scale == 0:
        return decimal.Decimal
    exponent = -scale

    def scaled(unscaled: int) -> decimal.Decimal:
        return decimal.Decimal(unscaled).scaleb(exponent, _DECIMAL_CONTEXT)

    return scaled


def _converter(t: SparkType) -> Converter | None:
    """The converter for a value of type ``t`` in a slot, ``None`` if the raw value is final."""
    if isinstance(t, AtomicType):
        name = t.name
        if name == "null":
            return lambda buf, base, word: None
        if name == "string":

            def string(buf: bytes, base: int, word: int) -> str:
                start, end = _span(buf, base, word)
                # Spark strings may hold invalid UTF-8; decode the way the JVM does.
                return buf[start:end].decode("utf-8", "replace")

            return string
        if name == "binary":

            def binary(buf: bytes, base: int, word: int) -> bytes:
                start, end = _span(buf, base, word)
                return buf[start:end]

            return binary
        return None
    if isinstance(t, DecimalType):
        scale = _decimal_from_unscaled(t.scale)
        if t.precision <= 18:
            return lambda buf, base, unscaled: scale(unscaled)

        def big_decimal(buf: bytes, base: int, word: int) -> decimal.Decimal:
            start, end = _span(buf, base, word)
            return scale(int.from_bytes(buf[start:end], "big", signed=True))

        return big_decimal
    if isinstance(t, StructType):
        read_row = _row_reader(t)
        fixed = 8 * (_bitset_words(len(t.fields)) + len(t.fields))

        def nested_row(buf: bytes, base: int, word: int) -> tuple[Any, ...]:
            start, end = _span(buf, base, word)
            if end - start < fixed:
                raise _OutOfBounds(f"nested row of {end - start} bytes, needs {fixed}")
            return read_row(buf, start)

        return nested_row
    if isinstance(t, ArrayType):
        read_array = _array_reader(t.element)

        def array(buf: bytes, base: int, word: int) -> list[Any]:
            start, end = _span(buf, base, word)
            return read_array(buf, start, end - start)

        return array
    read_keys = _array_reader(t.key)
    read_values = _array_reader(t.value)

    def map_(buf: bytes, base: int, word: int) -> MapValue:
        start, end = _span(buf, base, word)
        if end - start < 8:
            raise _OutOfBounds(f"map of {end - start} bytes")
        (key_bytes,) = _INT64.unpack_from(buf, start)
        values_start = start + 8 + key_bytes
        if key_bytes < 0 or values_start > end:
            raise _OutOfBounds(f"map key array of {key_bytes} bytes in a map of {end - start}")
        keys = read_keys(buf, start + 8, key_bytes)
        values = read_values(buf, values_start, end - values_start)
        if len(keys) != len(values):
            raise _OutOfBounds(f"map with {len(keys)} keys but {len(values)} values")
        return MapValue(tuple(zip(keys, values, strict=True)))

    return map_


def slot_format(schema: StructType) -> str:
    """The ``struct`` format (without byte order) of a row's null bitset and slots:
    one ``Q`` per bitset word, then each field's slot."""
    fmt = ["Q" * _bitset_words(len(schema.fields))]
    for t in (f.type for f in schema.fields):
        fmt.append(_ROW_SLOT[t.name] if isinstance(t, AtomicType) and t.name in _ROW_SLOT else _word_code(t))
    return "".join(fmt)


def slot_converter(t: SparkType) -> Converter | None:
    """``converter(buf, base, word)``: the Python value of a non-null field of type ``t``
    whose slot holds ``word``, in the row starting at ``base``; ``None`` when the raw
    slot value is final. Raises ``struct.error``, ``IndexError``, ``ValueError`` or
    an internal error on bytes that do not fit (callers fall back to :class:`RowDecoder`
    for the message)."""
    return _converter(t)


def _word_code(t: SparkType) -> str:
    """Format of an 8-byte word that is not a primitive: a small decimal's signed
    unscaled long, or an unsigned ``(offset << 32) | size``."""
    return "q" if isinstance(t, DecimalType) and t.precision <= 18 else "Q"


def _bitset_words(n: int) -> int:
    return (n + 63) // 64


def _row_reader(schema: StructType) -> RowReader:
    types = [f.type for f in schema.fields]
    words = _bitset_words(len(types))
    fmt = ["<", "Q" * words]
    converters: list[tuple[int, Converter]] = []
    for i, t in enumerate(types):
        if isinstance(t, AtomicType) and t.name in _ROW_SLOT:
            fmt.append(_ROW_SLOT[t.name])
        else:
            fmt.append(_word_code(t))
        conv = _converter(t)
        if conv is not None:
            converters.append((i, conv))
    unpack = struct.Struct("".join(fmt)).unpack_from
    convs = tuple(converters)

    def read_with_nulls(buf: bytes, base: int) -> tuple[Any, ...]:
        raw = unpack(buf, base)
        nulls = 0
        for w in range(words):
            nulls |= raw[w] << (64 * w)
        values = list(raw[words:])
        if nulls:
            _apply_nulls(values, nulls)
        for i, conv in convs:
            value = values[i]
            if value is not None:
                values[i] = conv(buf, base, value)
        return tuple(values)

    return _generate_row_reader(schema, words, unpack, dict(convs), read_with_nulls)


def _generate_row_reader(
    schema: StructType,
    words: int,
    unpack: Callable[[bytes, int], tuple[Any, ...]],
    convs: dict[int, Converter],
    read_with_nulls: RowReader,
) -> RowReader:
    """Generate (through :mod:`codegen`) the reader of rows without nulls, the common
    case on the ingest path: one unpack into locals, strings and binaries sliced
    inline, other converters called once, no loop. A row with a null bit set goes to
    ``read_with_nulls``.

    Only integers and fixed text go into the generated source, never schema names.
    """
    types = [f.type for f in schema.fields]
    n = len(types)
    if n == 0:
        return lambda buf, base: ()
    bits = [f"n{w}" for w in range(words)]
    values = [f"v{i}" for i in range(n)]
    code = FunctionSource(f"unsaferow reader {type_to_simple_string(schema)}", "read", ["buf", "base"])
    code.bind_all({"unpack": unpack, "read_with_nulls": read_with_nulls, "OutOfBounds": _OutOfBounds})
    code.add(
        f"({', '.join(bits + values)},) = unpack(buf, base)",
        f"if {' or '.join(bits)}:",
        "    return read_with_nulls(buf, base)",
        "size = len(buf)",
    )
    for i, conv in convs.items():
        t = types[i]
        if isinstance(t, AtomicType) and t.name in ("string", "binary"):
            decode = '.decode("utf-8", "replace")' if t.name == "string" else ""
            code.add(
                f"start = base + (v{i} >> 32)",
                f"end = start + (v{i} & {_LOW32})",
                "if end > size:",
                "    raise OutOfBounds(f'value at [{start}, {end}) beyond {size} bytes')",
                f"v{i} = buf[start:end]{decode}",
            )
        else:
            code.add(f"v{i} = {code.bind(f'c{i}', conv)}(buf, base, v{i})")
    code.add(f"return ({', '.join(values)},)")
    read: RowReader = code.compile()
    return read


def _apply_nulls(values: list[Any], nulls: int) -> None:
    """Set ``values[i] = None`` for every bit ``i`` set in ``nulls``."""
    n = len(values)
    while nulls:
        low = nulls & -nulls
        i = low.bit_length() - 1
        if i >= n:
            raise _OutOfBounds(f"null bit {i} set for a row of {n} fields")
        values[i] = None
        nulls ^= low


def _array_reader(element: SparkType) -> ArrayReader:
    if isinstance(element, AtomicType) and element.name == "null":

        def read_nulls(buf: bytes, base: int, size: int) -> list[Any]:
            count, _ = _array_header(buf, base, size, 0)
            return [None] * count

        return read_nulls
    if isinstance(element, AtomicType) and element.name in _ARRAY_ELEMENT:
        code = _ARRAY_ELEMENT[element.name]
        width = struct.calcsize("<" + code)
        conv: Converter | None = None
    else:
        code, width = _word_code(element), 8
        conv = _converter(element)

    def read(buf: bytes, base: int, size: int) -> list[Any]:
        count, first = _array_header(buf, base, size, width)
        if count == 0:
            return []
        values = list(struct.unpack_from(f"<{count}{code}", buf, first))
        nulls = int.from_bytes(buf[base + 8 : first], "little")
        if nulls:
            _apply_nulls(values, nulls)
            if conv is not None:
                return [None if v is None else conv(buf, base, v) for v in values]
            return values
        if conv is not None:
            return [conv(buf, base, v) for v in values]
        return values

    return read


def _array_header(buf: bytes, base: int, size: int, width: int) -> tuple[int, int]:
    """Return (element count, offset of the first element) of an array, checked."""
    if size < 8:
        raise _OutOfBounds(f"array of {size} bytes")
    (count,) = _INT64.unpack_from(buf, base)
    first = base + 8 + 8 * _bitset_words(count)
    if count < 0 or first + count * width > base + size:
        raise _OutOfBounds(f"array of {count} elements does not fit {size} bytes")
    return count, first
