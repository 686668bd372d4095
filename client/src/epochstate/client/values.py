"""Python values <-> ``epochstate.v1.Value``, guided by the store's schema.

To the daemon: ``tuple``/``list``/``dict`` fill structs (by position or name),
``list`` fills arrays, ``dict`` fills maps; ``datetime.date`` and
``datetime.datetime`` (naive = UTC) fill dates and timestamps; ISO strings are
accepted for them too. From the daemon: structs become
:class:`~epochstate.client.structs.Struct` (every field, in schema order, even
when names repeat), arrays ``list``, maps ``dict`` (or a list of pairs when keys
are not hashable), dates ``datetime.date``, timestamps naive UTC
``datetime.datetime``, decimals ``decimal.Decimal``.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping, Sequence
from decimal import Decimal
from typing import Any

from epochstate.client.structs import Struct
from epochstate.core.sparktypes import (
    ArrayType,
    AtomicType,
    DecimalType,
    MapType,
    SparkType,
    StructType,
)
from epochstate.v1 import epochstate_pb2 as pb

_EPOCH_DATE = dt.date(1970, 1, 1)
_EPOCH_DT = dt.datetime(1970, 1, 1)


def _micros(value: dt.datetime) -> int:
    if value.tzinfo is not None:
        value = value.astimezone(dt.timezone.utc).replace(tzinfo=None)
    delta = value - _EPOCH_DT
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def to_value(value: Any, t: SparkType) -> pb.Value:
    """A Value message for ``value`` of Spark type ``t`` (the daemon validates it)."""
    if value is None:
        return pb.Value(null=True)
    # The kinds most keys are made of first: one look at the value's own type.
    plain = _PLAIN_TO.get(value.__class__)
    if plain is not None and t.__class__ is AtomicType:
        return pb.Value(**{plain: value})
    if isinstance(t, StructType):
        return pb.Value(struct=to_row(value, t))
    if isinstance(t, ArrayType):
        return pb.Value(array=pb.Array(elements=[to_value(v, t.element) for v in value]))
    if isinstance(t, MapType):
        items = list(value.items()) if isinstance(value, Mapping) else list(value)
        return pb.Value(
            map=pb.Map(
                keys=[to_value(k, t.key) for k, _ in items], values=[to_value(v, t.value) for _, v in items]
            )
        )
    if isinstance(t, DecimalType):
        return pb.Value(decimal=str(value)) if not isinstance(value, int) else pb.Value(int=value)
    assert isinstance(t, AtomicType)
    if isinstance(value, bool):
        return pb.Value(bool=value)
    if isinstance(value, int):
        return pb.Value(int=value)
    if isinstance(value, float):
        return pb.Value(float=value)
    if isinstance(value, Decimal):
        return pb.Value(decimal=str(value))
    if isinstance(value, (bytes, bytearray, memoryview)):
        return pb.Value(binary=bytes(value))
    if isinstance(value, dt.datetime):
        return pb.Value(timestamp_micros=_micros(value))
    if isinstance(value, dt.date):
        return pb.Value(date=(value - _EPOCH_DATE).days)
    return pb.Value(string=str(value))


def to_row(value: Any, schema: StructType, *, partial: bool = False, into: pb.Row | None = None) -> pb.Row:
    """A Row for a struct given as a sequence (by position) or mapping (by name); with
    ``into``, its fields are added to that (empty) Row, a request's own, and it is returned."""
    row = pb.Row() if into is None else into
    fields = schema.fields
    if value.__class__ in (list, tuple) and len(value) <= len(fields):  # no ABC checks
        # Added in place: a Row made from a list of Values copies each of them.
        add, append = row.fields.add, row.fields.append
        for v, f in zip(value, fields, strict=False):
            plain = _PLAIN_TO.get(v.__class__)
            if plain is not None and f.type.__class__ is AtomicType:
                add(**{plain: v})
            else:
                append(to_value(v, f.type))
        return row
    if isinstance(value, Mapping):
        unknown = set(value) - set(schema.names)
        if unknown:
            raise ValueError(f"unknown field(s) {sorted(unknown)}; fields are {list(schema.names)}")
        names = [n for n in schema.names if n in value] if partial else list(schema.names)
        values = [value.get(n) for n in names]
    elif isinstance(value, Sequence) and not isinstance(value, (str, bytes)):
        values = list(value)
    else:
        values = [value]  # a single-field key given bare
    row.fields.extend(
        [to_value(v, f.type) for v, f in zip(values, schema.fields, strict=False)]
        + [
            pb.Value(string=str(v))
            for v in values[len(schema.fields) :]  # too many: let the daemon say so
        ]
    )
    return row


def to_rows(values: Iterable[Any], schema: StructType, rows: Any) -> None:
    """Each of ``values`` as :func:`to_row` makes it, added to ``rows`` (a request's
    repeated ``Row`` field): a key given as a list or tuple of the plain types filled in
    place, without a Row made and copied per key."""
    add = rows.add
    fields = schema.fields
    width = len(fields)
    atomic = [f.type.__class__ is AtomicType for f in fields]
    plain_of = _PLAIN_TO.get
    for value in values:
        if value.__class__ in (list, tuple) and len(value) <= width:
            row = add().fields
            for v, f, is_atomic in zip(value, fields, atomic, strict=False):
                plain = plain_of(v.__class__)
                if plain is not None and is_atomic:
                    row.add(**{plain: v})
                else:
                    row.append(to_value(v, f.type))
        else:
            to_row(value, schema, into=add())


# Python types sent as the Value kind of the same name, and Value kinds read back as
# they are, whatever the Spark type.
_PLAIN_TO: dict[type, str] = {int: "int", str: "string", float: "float", bool: "bool", bytes: "binary"}
_PLAIN_FROM = frozenset({"int", "string", "float", "bool", "binary"})


def from_value(v: pb.Value, t: SparkType) -> Any:
    kind = v.WhichOneof("kind")
    if kind in _PLAIN_FROM:
        return getattr(v, kind)
    if kind is None or kind == "null":
        return None
    if kind == "struct":
        return from_row(v.struct, t) if isinstance(t, StructType) else list(v.struct.fields)
    if kind == "array":
        element = t.element if isinstance(t, ArrayType) else AtomicType("null")
        return [from_value(e, element) for e in v.array.elements]
    if kind == "map":
        return from_map(v.map, t)
    if kind == "decimal":
        return Decimal(v.decimal)
    if kind == "date":
        return _EPOCH_DATE + dt.timedelta(days=v.date)
    if kind == "timestamp_micros":
        return _EPOCH_DT + dt.timedelta(microseconds=v.timestamp_micros)
    return getattr(v, kind)


def from_map(m: pb.Map, t: SparkType) -> dict[Any, Any] | list[tuple[Any, Any]]:
    """A map value of type ``t``: a ``dict``, or its pairs when a key is not hashable."""
    kt = t.key if isinstance(t, MapType) else AtomicType("null")
    vt = t.value if isinstance(t, MapType) else AtomicType("null")
    pairs = [(from_value(k, kt), from_value(x, vt)) for k, x in zip(m.keys, m.values, strict=True)]
    try:
        return dict(pairs)
    except TypeError:
        return pairs


def from_row(row: pb.Row, schema: StructType) -> Struct:
    """A struct value: one value per field the row holds, named by the schema, in
    schema order. Values beyond the schema's fields (never sent by a daemon that
    agrees on the schema) are kept, under the name ``""``."""
    given = row.fields
    fields = schema.fields
    values = []
    for f, v in zip(fields, given, strict=False):
        kind = v.WhichOneof("kind")  # the plain kinds here, saving a call per value
        values.append(getattr(v, kind) if kind in _PLAIN_FROM else from_value(v, f.type))
    if len(given) == len(fields):
        return Struct.of_names(_names_of(schema), values)
    names = [f.name for f in fields[: len(given)]]
    for extra in given[len(names) :]:
        names.append("")
        values.append(from_value(extra, AtomicType("null")))
    return Struct(names, values)


# The field names of the schemas decoded lately, by id (the schema is held too, so
# that its id is not another's while the entry lives); emptied when full.
_NAMES: dict[int, tuple[StructType, tuple[str, ...]]] = {}
_NAMES_MOST = 1024


def _names_of(schema: StructType) -> tuple[str, ...]:
    known = _NAMES.get(id(schema))
    if known is not None and known[0] is schema:
        return known[1]
    names = schema.names
    if len(_NAMES) >= _NAMES_MOST:
        _NAMES.clear()
    _NAMES[id(schema)] = (schema, names)
    return names
