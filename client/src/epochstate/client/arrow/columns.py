"""Arrow arrays from the daemon's ``Value`` messages, column by column.

The daemon answers with protobuf ``Record`` messages: rows of ``Value``, a oneof
per field. Decoding each value into a Python object and then handing rows to Arrow
costs several calls per field; here a column is read in one pass of a single
attribute (``v.int`` for every value of a ``long`` field), and only the values that
read as the default (0, "", False) are asked which kind they hold, because a null
reads as the default too. Structs, arrays and maps become Arrow's nested arrays
from their children's columns and offsets, so no Python object is made per
nested value either.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from operator import attrgetter, itemgetter
from typing import Any

import pyarrow as pa  # type: ignore[import-untyped]

from epochstate.client.values import from_value
from epochstate.core.sparktypes import ArrayType, AtomicType, DecimalType, MapType, SparkType, StructType
from epochstate.v1 import epochstate_pb2 as pb

# The Value field each atomic Spark type is sent in, and that field's default.
KINDS: dict[str, tuple[str, Any]] = {
    "boolean": ("bool", False),
    "byte": ("int", 0),
    "short": ("int", 0),
    "integer": ("int", 0),
    "long": ("int", 0),
    "float": ("float", 0.0),
    "double": ("float", 0.0),
    "string": ("string", ""),
    "binary": ("binary", b""),
    "date": ("date", 0),
    "timestamp": ("timestamp_micros", 0),
    "timestamp_ntz": ("timestamp_micros", 0),
}
_NULL = pb.Value(null=True)


def column(values: Sequence[pb.Value], t: SparkType, arrow: pa.DataType) -> pa.Array:
    """The Arrow array (of type ``arrow``, :func:`~epochstate.client.arrow.types.arrow_type`
    of ``t``) of ``values``, Values of Spark type ``t``."""
    if isinstance(t, AtomicType):
        if t.name == "null":
            return pa.nulls(len(values), arrow)
        kind, default = KINDS[t.name]
        return pa.array(_read(values, kind, default, t), type=arrow)
    if isinstance(t, DecimalType):
        return _decimals(values, t, arrow)
    if isinstance(t, StructType):
        mask = [not v.HasField("struct") for v in values]
        null_row = [_NULL] * len(t.fields)
        rows = [null_row if m else v.struct.fields for v, m in zip(values, mask, strict=True)]
        return struct_column(rows, t, arrow, mask)
    if isinstance(t, ArrayType):
        mask = [not v.HasField("array") for v in values]
        elements = [v.array.elements for v in values]
        offsets = _offsets(elements)
        child = column(list(itertools.chain.from_iterable(elements)), t.element, arrow.value_type)
        return pa.ListArray.from_arrays(offsets, child, type=arrow, mask=_mask(mask))
    assert isinstance(t, MapType)
    mask = [not v.HasField("map") for v in values]
    keys = [v.map.keys for v in values]
    offsets = _offsets(keys)
    key_column = column(list(itertools.chain.from_iterable(keys)), t.key, arrow.key_type)
    items = list(itertools.chain.from_iterable(v.map.values for v in values))
    item_column = column(items, t.value, arrow.item_type)
    return pa.MapArray.from_arrays(offsets, key_column, item_column, type=arrow, mask=_mask(mask))


def struct_column(
    rows: Sequence[Sequence[pb.Value]],
    t: StructType,
    arrow: pa.StructType,
    mask: Sequence[bool] | None = None,
    *,
    empty_is_null: bool = False,
) -> pa.StructArray:
    """The struct array of ``rows`` (each a Row's fields, in schema order), null where
    ``mask`` is True (and, with ``empty_is_null``, where a row has no field: a record's
    absent value). A row with fewer fields than the schema reads as nulls beyond them."""
    width = len(t.fields)
    if width == 0:
        return struct_of([], arrow, len(rows), mask)
    if rows and min(map(len, rows)) < width:
        if empty_is_null:
            empty = [len(r) == 0 for r in rows]
            mask = empty if mask is None else [a or b for a, b in zip(mask, empty, strict=True)]
        rows = [r if len(r) >= width else [*r, *[_NULL] * (width - len(r))] for r in rows]
    # One pass per field: transposing with zip(*rows) costs more than all of them.
    children = [
        _atomic(rows, i, f.type, arrow.field(i).type)
        if isinstance(f.type, AtomicType) and f.type.name in KINDS
        else column(list(map(itemgetter(i), rows)), f.type, arrow.field(i).type)
        for i, f in enumerate(t.fields)
    ]
    return struct_of(children, arrow, len(rows), mask)


def struct_of(
    children: Sequence[pa.Array], arrow: pa.StructType, length: int, mask: Sequence[bool] | None = None
) -> pa.StructArray:
    """The struct array of ``length`` rows whose fields are ``children`` (one array per
    field of ``arrow``), null where ``mask`` is True."""
    if not children:
        return pa.array([{}] * length, type=arrow, mask=_mask(mask))
    return pa.StructArray.from_arrays(children, fields=list(arrow), mask=_mask(mask))


def _atomic(rows: Sequence[Sequence[pb.Value]], index: int, t: AtomicType, arrow: pa.DataType) -> pa.Array:
    """The column of field ``index`` of ``rows``, of atomic type ``t``: read straight from
    the rows (no list of the field's Values in between)."""
    kind, default = KINDS[t.name]
    out = list(map(attrgetter(kind), map(itemgetter(index), rows)))
    defaults = [i for i, x in enumerate(out) if x == default]
    if defaults:
        _checked(out, defaults, [rows[i][index] for i in defaults], kind, t)
    return pa.array(out, type=arrow)


def _read(values: Sequence[pb.Value], kind: str, default: Any, t: SparkType) -> list[Any]:
    """``kind`` of every value, checked as :func:`_checked` says."""
    out = list(map(attrgetter(kind), values))
    defaults = [i for i, x in enumerate(out) if x == default]
    if defaults:
        _checked(out, defaults, [values[i] for i in defaults], kind, t)
    return out


def _checked(out: list[Any], defaults: list[int], values: list[pb.Value], kind: str, t: SparkType) -> None:
    """Check the entries of ``out`` at ``defaults`` (``values`` are their Values): they read
    as the default of ``kind``, as a null and a value sent in another kind do. A null
    becomes None, another kind is decoded whole."""
    held = [v.WhichOneof("kind") for v in values]
    for i, h, v in zip(defaults, held, values, strict=True):
        if h != kind:
            out[i] = None if h in (None, "null") else from_value(v, t)


def _decimals(values: Sequence[pb.Value], t: DecimalType, arrow: pa.DataType) -> pa.Array:
    texts = _read(values, "decimal", "", t)
    if all(x is None or isinstance(x, str) for x in texts):
        try:
            return pa.array(texts, type=pa.string()).cast(arrow)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            pass  # a form Arrow's parser does not take: through Python's Decimal
    return pa.array(
        [None if v.WhichOneof("kind") in (None, "null") else from_value(v, t) for v in values], arrow
    )


def _offsets(lists: Sequence[Sequence[Any]]) -> pa.Array:
    return pa.array(list(itertools.accumulate(map(len, lists), initial=0)), type=pa.int32())


def _mask(mask: Sequence[bool] | None) -> pa.Array | None:
    return pa.array(mask, type=pa.bool_()) if mask is not None and any(mask) else None
