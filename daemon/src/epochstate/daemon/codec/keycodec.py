"""An order-preserving, self-delimiting byte encoding of decoded Spark values.

Guarantees:

* ``decode(encode(v)) == v`` for every value of the model in
  :mod:`epochstate.core.sparktypes` (tuples, lists, :class:`MapValue`,
  ``None``, ``bool``, ``int`` in the signed 64-bit range, ``float``, ``Decimal``,
  ``str``, ``bytes``).
* Each encoded value is self-delimiting, so a key's fields can be concatenated and
  a fixed-width suffix (the epoch) appended without ambiguity.
* For two values of the same Spark type, byte order equals value order (nulls
  first; decimals compare correctly when they share a scale, which values of one
  schema always do). So encoding the leading fields of a key gives a byte prefix
  of every key that starts with them.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from decimal import Decimal
from typing import Any

from epochstate.core.sparktypes import MapValue

_NULL = 0x01
_FALSE = 0x02
_TRUE = 0x03
_INT = 0x10
_FLOAT = 0x20
_DECIMAL = 0x28
_STRING = 0x30
_BYTES = 0x31
_STRUCT = 0x40
_ARRAY = 0x41
_MAP = 0x42
_END = 0x00

_U64 = struct.Struct(">Q")
_U32 = struct.Struct(">I")
_D64 = struct.Struct(">d")
_SIGN = 1 << 63
_MASK64 = (1 << 64) - 1


_STRING_HEAD = bytes((_STRING,))
_INT_HEAD = bytes((_INT,))
_TERMINATOR = b"\x00\x00"


class KeyCodecError(ValueError):
    """A value outside the model, or bytes that are not a valid encoding."""


def _escape(raw: bytes) -> bytes:
    # 0x00 inside the payload becomes 0x00 0xFF; 0x00 0x00 terminates.
    return raw.replace(b"\x00", b"\x00\xff") + b"\x00\x00"


def _encode_into(out: bytearray, value: Any) -> None:
    if value is None:
        out.append(_NULL)
    elif value is True:
        out.append(_TRUE)
    elif value is False:
        out.append(_FALSE)
    elif isinstance(value, int):
        if not -_SIGN <= value < _SIGN:
            raise KeyCodecError(f"integer {value} is outside the signed 64-bit range")
        out.append(_INT)
        out += _U64.pack((value + _SIGN) & _MASK64)
    elif isinstance(value, float):
        bits = _U64.unpack(_D64.pack(value))[0]
        bits = bits ^ _MASK64 if bits & _SIGN else bits | _SIGN
        out.append(_FLOAT)
        out += _U64.pack(bits)
    elif isinstance(value, Decimal):
        sign, digits, exponent = value.as_tuple()
        if not isinstance(exponent, int):
            raise KeyCodecError(f"decimal {value} is not finite")
        unscaled = int("".join(map(str, digits)) or "0") * (-1 if sign else 1)
        # Same scale -> same exponent, so ordering by unscaled value is numeric order.
        magnitude = abs(unscaled).to_bytes((abs(unscaled).bit_length() + 7) // 8 or 1, "big")
        out.append(_DECIMAL)
        out += _U32.pack((exponent + (1 << 31)) & 0xFFFFFFFF)
        if unscaled < 0:
            out.append(0x00)
            out.append(0xFF - len(magnitude))
            out += bytes(0xFF - b for b in magnitude)
        else:
            out.append(0x01)
            out.append(len(magnitude))
            out += magnitude
    elif isinstance(value, str):
        out.append(_STRING)
        out += _escape(value.encode("utf-8"))
    elif isinstance(value, (bytes, bytearray, memoryview)):
        out.append(_BYTES)
        out += _escape(bytes(value))
    elif isinstance(value, tuple):
        out.append(_STRUCT)
        for item in value:
            _encode_into(out, item)
        out.append(_END)
    elif isinstance(value, list):
        out.append(_ARRAY)
        for item in value:
            _encode_into(out, item)
        out.append(_END)
    elif isinstance(value, MapValue):
        out.append(_MAP)
        for k, v in value.entries:
            _encode_into(out, k)
            _encode_into(out, v)
        out.append(_END)
    else:
        raise KeyCodecError(f"cannot encode {type(value).__name__} value {value!r}")


def encode(value: Any) -> bytes:
    """Encode one value."""
    out = bytearray()
    _encode_into(out, value)
    return bytes(out)


def encode_fields(fields: Sequence[Any]) -> bytes:
    """Encode a row's fields back to back, without a struct header.

    Encoding the first ``n`` fields of a key yields a prefix of the full key's
    encoding; that is what prefix scans rely on.
    """
    parts: list[bytes] = []
    for item in fields:
        # Strings and integers are most keys: encoded here without the general dispatch.
        kind = type(item)
        if kind is str:
            parts.append(_STRING_HEAD + item.encode("utf-8").replace(b"\x00", b"\x00\xff") + _TERMINATOR)
        elif kind is int and -_SIGN <= item < _SIGN:
            parts.append(_INT_HEAD + _U64.pack(item + _SIGN))
        else:
            out = bytearray()
            _encode_into(out, item)
            parts.append(bytes(out))
    return b"".join(parts)


_INT_HEAD = bytes((_INT,))
_STRING_HEAD = bytes((_STRING,))
_BYTES_HEAD = bytes((_BYTES,))
_BOOLS = (bytes((_FALSE,)), bytes((_TRUE,)))
INT_RANGE = (-_SIGN, _SIGN - 1)


# encode_int(v) == INT_HEAD + U64.pack(v + INT_OFFSET), for loops that inline it.
INT_HEAD, U64, INT_OFFSET = _INT_HEAD, _U64, _SIGN


def encode_int(value: int) -> bytes:
    """``encode(value)`` for an int the caller has checked is within :data:`INT_RANGE`."""
    return _INT_HEAD + _U64.pack(value + _SIGN)


def encode_str(value: str) -> bytes:
    """``encode(value)`` for a ``str``."""
    return _STRING_HEAD + _escape(value.encode("utf-8"))


def encode_bytes(value: bytes) -> bytes:
    """``encode(value)`` for ``bytes``."""
    return _BYTES_HEAD + _escape(value)


def encode_bool(value: bool) -> bytes:
    """``encode(value)`` for a ``bool``."""
    return _BOOLS[value]


def _unescape(buf: bytes, pos: int) -> tuple[bytes, int]:
    out = bytearray()
    while True:
        nul = buf.find(b"\x00", pos)
        if nul < 0 or nul + 1 >= len(buf):
            raise KeyCodecError("unterminated string or binary")
        out += buf[pos:nul]
        marker = buf[nul + 1]
        if marker == 0x00:
            return bytes(out), nul + 2
        if marker != 0xFF:
            raise KeyCodecError(f"bad escape 0x{marker:02x} at {nul + 1}")
        out.append(0)
        pos = nul + 2


def _decode_at(buf: bytes, pos: int) -> tuple[Any, int]:
    try:
        tag = buf[pos]
    except IndexError:
        raise KeyCodecError("truncated encoding") from None
    pos += 1
    if tag == _NULL:
        return None, pos
    if tag == _TRUE:
        return True, pos
    if tag == _FALSE:
        return False, pos
    if tag == _INT:
        return _U64.unpack_from(buf, pos)[0] - _SIGN, pos + 8
    if tag == _FLOAT:
        bits = _U64.unpack_from(buf, pos)[0]
        bits = bits ^ _SIGN if bits & _SIGN else bits ^ _MASK64
        return _D64.unpack(_U64.pack(bits))[0], pos + 8
    if tag == _DECIMAL:
        exponent = _U32.unpack_from(buf, pos)[0] - (1 << 31)
        negative = buf[pos + 4] == 0x00
        size = buf[pos + 5]
        pos += 6
        if negative:
            size = 0xFF - size
            magnitude = int.from_bytes(bytes(0xFF - b for b in buf[pos : pos + size]), "big")
        else:
            magnitude = int.from_bytes(buf[pos : pos + size], "big")
        digits = tuple(int(d) for d in str(magnitude))
        return Decimal((1 if negative else 0, digits, exponent)), pos + size
    if tag == _STRING:
        raw, pos = _unescape(buf, pos)
        return raw.decode("utf-8"), pos
    if tag == _BYTES:
        return _unescape(buf, pos)
    if tag in (_STRUCT, _ARRAY, _MAP):
        items: list[Any] = []
        while True:
            if pos >= len(buf):
                raise KeyCodecError("unterminated struct, array or map")
            if buf[pos] == _END:
                pos += 1
                break
            item, pos = _decode_at(buf, pos)
            items.append(item)
        if tag == _STRUCT:
            return tuple(items), pos
        if tag == _ARRAY:
            return items, pos
        return MapValue(tuple(zip(items[0::2], items[1::2], strict=True))), pos
    raise KeyCodecError(f"unknown tag 0x{tag:02x} at {pos - 1}")


def _decode_checked(buf: bytes, pos: int) -> tuple[Any, int]:
    try:
        return _decode_at(buf, pos)
    except (struct.error, IndexError, ValueError) as exc:
        if isinstance(exc, KeyCodecError):
            raise
        raise KeyCodecError(f"invalid encoding: {exc}") from exc


def decode(buf: bytes) -> Any:
    """Decode one value; the whole buffer must be consumed."""
    value, pos = _decode_checked(buf, 0)
    if pos != len(buf):
        raise KeyCodecError(f"{len(buf) - pos} trailing bytes")
    return value


def decode_fields(buf: bytes, count: int) -> tuple[Any, ...]:
    """Decode ``count`` back-to-back fields written by :func:`encode_fields`."""
    items: list[Any] = []
    pos = 0
    for _ in range(count):
        item, pos = _decode_checked(buf, pos)
        items.append(item)
    if pos != len(buf):
        raise KeyCodecError(f"{len(buf) - pos} trailing bytes")
    return tuple(items)
