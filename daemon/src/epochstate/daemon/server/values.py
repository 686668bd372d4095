"""Request keys: ``epochstate.v1.Row`` messages to canonical decoded keys.

:func:`key_from_proto` validates a request key against the key schema and coerces
it to the canonical decoded form the store indexes by; anything that does not fit
raises :class:`BadKey` naming the offending field. :class:`KeyEncoder` is the read
hot path: a whole batch of request keys straight to the store's key encoding.
(Outbound conversion, decoded values to messages, lives in
:mod:`epochstate.daemon.codec.records`.)
"""

from __future__ import annotations

import datetime as dt
import struct
from collections.abc import Callable, Sequence
from decimal import Decimal, InvalidOperation
from typing import Any

from epochstate.core import reasons
from epochstate.core.errors import EpochStateError
from epochstate.core.sparktypes import (
    ArrayType,
    AtomicType,
    DecimalType,
    MapType,
    MapValue,
    SparkType,
    StructType,
    type_to_simple_string,
)
from epochstate.daemon.codec import keycodec
from epochstate.v1 import epochstate_pb2 as pb


class BadKey(EpochStateError):
    """A request key that does not match the store's key schema."""

    reason = reasons.BAD_KEY


_INT_RANGES = {
    "byte": (-(2**7), 2**7 - 1),
    "short": (-(2**15), 2**15 - 1),
    "integer": (-(2**31), 2**31 - 1),
    "long": (-(2**63), 2**63 - 1),
}
_F32 = struct.Struct("<f")
_EPOCH_DATE = dt.date(1970, 1, 1)
_EPOCH_DT = dt.datetime(1970, 1, 1)


# -- inbound --------------------------------------------------------------------


def _describe(v: pb.Value) -> str:
    kind = v.WhichOneof("kind")
    if kind is None:
        return "an empty Value"
    if kind in ("struct", "array", "map"):
        return kind
    return f"{kind} {getattr(v, kind)!r}"


def _expect(path: str, t: SparkType, v: pb.Value) -> BadKey:
    return BadKey(f"key field {path!r}: expected {type_to_simple_string(t)}, got {_describe(v)}")


def _coerce(path: str, t: SparkType, v: pb.Value) -> Any:
    kind = v.WhichOneof("kind")
    if kind == "null":
        return None
    if isinstance(t, AtomicType):
        name = t.name
        if name in _INT_RANGES:
            if kind != "int":
                raise _expect(path, t, v)
            low, high = _INT_RANGES[name]
            if not low <= v.int <= high:
                raise BadKey(f"key field {path!r}: {v.int} is out of range for {name}")
            return v.int
        if name in ("float", "double"):
            if kind == "float":
                number = v.float
            elif kind == "int":
                number = float(v.int)
            else:
                raise _expect(path, t, v)
            if name == "float":
                # The store holds float32 values widened to double; match them.
                number = _F32.unpack(_F32.pack(number))[0]
            return 0.0 if number == 0 else number  # Spark normalizes -0.0 in keys
        if name == "boolean" and kind == "bool":
            return v.bool
        if name == "string" and kind == "string":
            return v.string
        if name == "binary" and kind == "binary":
            return v.binary
        if name == "date":
            if kind == "date":
                return v.date
            if kind == "string":
                try:
                    return (dt.date.fromisoformat(v.string) - _EPOCH_DATE).days
                except ValueError:
                    raise BadKey(f"key field {path!r}: {v.string!r} is not a date") from None
            raise _expect(path, t, v)
        if name in ("timestamp", "timestamp_ntz"):
            if kind == "timestamp_micros":
                return v.timestamp_micros
            if kind == "string":
                return _parse_timestamp(path, v.string, name == "timestamp")
            raise _expect(path, t, v)
        raise _expect(path, t, v)
    if isinstance(t, DecimalType):
        if kind == "decimal":
            text = v.decimal
        elif kind == "int":
            text = str(v.int)
        else:
            raise _expect(path, t, v)
        try:
            exact = Decimal(text)
            quantized = exact.quantize(Decimal(1).scaleb(-t.scale))
        except InvalidOperation:
            raise BadKey(f"key field {path!r}: {text!r} is not a decimal({t.precision},{t.scale})") from None
        if quantized != exact or len(quantized.as_tuple().digits) > t.precision:
            raise BadKey(f"key field {path!r}: {text!r} does not fit decimal({t.precision},{t.scale})")
        return quantized
    if isinstance(t, StructType):
        if kind != "struct":
            raise _expect(path, t, v)
        return _coerce_row(path + ".", t, v.struct)
    if isinstance(t, ArrayType):
        if kind != "array":
            raise _expect(path, t, v)
        return [_coerce(f"{path}[{i}]", t.element, e) for i, e in enumerate(v.array.elements)]
    if isinstance(t, MapType):
        if kind != "map" or len(v.map.keys) != len(v.map.values):
            raise _expect(path, t, v)
        return MapValue(
            tuple(
                (_coerce(f"{path}.key", t.key, k), _coerce(f"{path}.value", t.value, x))
                for k, x in zip(v.map.keys, v.map.values, strict=True)
            )
        )
    raise _expect(path, t, v)


def _parse_timestamp(path: str, text: str, zoned: bool) -> int:
    try:
        parsed = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise BadKey(f"key field {path!r}: {text!r} is not an ISO-8601 timestamp") from None
    if parsed.tzinfo is not None:
        if not zoned:
            raise BadKey(f"key field {path!r}: timestamp_ntz takes no time zone, got {text!r}")
        parsed = parsed.astimezone(dt.timezone.utc).replace(tzinfo=None)
    delta = parsed - _EPOCH_DT
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def _coerce_row(prefix: str, schema: StructType, row: pb.Row, *, partial: bool = False) -> tuple[Any, ...]:
    given = len(row.fields)
    wanted = len(schema.fields)
    if given > wanted or (given < wanted and not partial):
        names = ", ".join(schema.names)
        where = f"struct {prefix[:-1]!r}" if prefix else "the key"
        raise BadKey(f"{where} has {wanted} field(s) ({names}); got {given}")
    return tuple(_coerce(prefix + f.name, f.type, v) for f, v in zip(schema.fields, row.fields, strict=False))


def key_from_proto(row: pb.Row, schema: StructType, *, partial: bool = False) -> tuple[Any, ...]:
    """The canonical decoded key for ``row``; ``partial`` allows leading fields only."""
    return _coerce_row("", schema, row, partial=partial)


def _fast_field(t: SparkType) -> Callable[[pb.Value], bytes | None] | None:
    """The store encoding of a field given in its natural kind, or None (take the full path)."""
    if not isinstance(t, AtomicType):
        return None
    name = t.name
    if name in _INT_RANGES:
        low, high = _INT_RANGES[name]
        encode_int = keycodec.encode_int

        def integral(v: pb.Value) -> bytes | None:
            if v.HasField("int"):
                number = v.int
                if low <= number <= high:
                    return encode_int(number)
            return None

        return integral
    if name not in _FAST_KIND:
        return None
    kind, encode = _FAST_KIND[name]

    def natural(v: pb.Value) -> bytes | None:
        return encode(getattr(v, kind)) if v.WhichOneof("kind") == kind else None

    return natural


_FAST_KIND: dict[str, tuple[str, Callable[[Any], bytes]]] = {
    "string": ("string", keycodec.encode_str),
    "boolean": ("bool", keycodec.encode_bool),
    "binary": ("binary", keycodec.encode_bytes),
    "date": ("date", keycodec.encode_int),  # int32 on the wire: always in range
    "timestamp": ("timestamp_micros", keycodec.encode_int),
    "timestamp_ntz": ("timestamp_micros", keycodec.encode_int),
}


class KeyEncoder:
    """Request keys of one key schema to the store's key encoding, compiled once.

    ``encode_all(rows)[i] == keycodec.encode_fields(key_from_proto(rows[i], schema))``
    for every row; :class:`BadKey` (naming the field) for the first row that does not
    fit. Keys whose fields come in their natural kind (an in-range int for an
    integral column, a string for a string column, ...) are encoded in one pass
    without building the canonical tuple; any other key takes the full path.
    """

    def __init__(self, schema: StructType) -> None:
        self.schema = schema
        fields = [_fast_field(f.type) for f in schema.fields]
        self._fields = [f for f in fields if f is not None] if None not in fields else []
        # One integral column (the commonest key): its range, for a loop with no call per key.
        only = schema.fields[0].type if len(schema.fields) == 1 else None
        name = only.name if isinstance(only, AtomicType) else ""
        self._int_range = _INT_RANGES.get(name)

    def canonical(self, row: pb.Row) -> tuple[Any, ...]:
        """The canonical decoded key of ``row`` (what an absent record echoes back)."""
        return key_from_proto(row, self.schema)

    def encode(self, row: pb.Row) -> bytes:
        return keycodec.encode_fields(key_from_proto(row, self.schema))

    def encode_all(self, rows: Sequence[pb.Row]) -> list[bytes]:
        fields, encode = self._fields, self.encode
        if not fields:
            return [encode(row) for row in rows]
        out: list[bytes] = []
        if self._int_range is not None:
            return self._encode_ints(rows, *self._int_range)
        if len(fields) == 1:  # most state keys have one column: no per-key join
            (take,) = fields
            for row in rows:
                values = row.fields
                raw = take(values[0]) if len(values) == 1 else None
                out.append(encode(row) if raw is None else raw)
            return out
        width = len(fields)
        for row in rows:
            values = row.fields
            parts = [take(v) for take, v in zip(fields, values, strict=True)] if len(values) == width else []
            out.append(b"".join(parts) if parts and None not in parts else encode(row))  # type: ignore[arg-type]
        return out

    def _encode_ints(self, rows: Sequence[pb.Row], low: int, high: int) -> list[bytes]:
        """``encode_all`` of keys of one integral column: ``keycodec.encode_int`` inlined."""
        head, pack, offset = keycodec.INT_HEAD, keycodec.U64.pack, keycodec.INT_OFFSET
        encode = self.encode
        out: list[bytes] = []
        append = out.append
        for row in rows:
            values = row.fields
            if len(values) == 1:
                value = values[0]
                number = value.int
                # A Value of another kind reads 0 here (a oneof's unset member): only a
                # zero needs the kind asked, and asking costs as much as the read.
                if (number or value.HasField("int")) and low <= number <= high:
                    append(head + pack(number + offset))
                    continue
            append(encode(row))
        return out
