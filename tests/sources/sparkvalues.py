"""Turning what PySpark returns (Row, datetime, bytearray, dict) into the values
the sources layer decodes, and both into hashable, strictly comparable forms."""

from __future__ import annotations

import datetime
import decimal
from typing import Any

from epochstate.core.sparktypes import (
    ArrayType,
    AtomicType,
    MapType,
    MapValue,
    SparkType,
    StructType,
)

_EPOCH = datetime.datetime(1970, 1, 1)
_EPOCH_DAY = datetime.date(1970, 1, 1)


def from_spark(value: Any, t: SparkType) -> Any:
    """The :mod:`sparktypes` value of a PySpark value of type ``t`` (local time is UTC)."""
    if value is None:
        return None
    if isinstance(t, AtomicType):
        if t.name in ("timestamp", "timestamp_ntz"):
            return (value - _EPOCH) // datetime.timedelta(microseconds=1)
        if t.name == "date":
            return (value - _EPOCH_DAY).days
        if t.name == "binary":
            return bytes(value)
        return value
    if isinstance(t, StructType):
        return tuple(from_spark(v, f.type) for v, f in zip(value, t.fields, strict=True))
    if isinstance(t, ArrayType):
        return [from_spark(v, t.element) for v in value]
    if isinstance(t, MapType):
        return MapValue(tuple((from_spark(k, t.key), from_spark(v, t.value)) for k, v in value.items()))
    return value


def freeze(value: Any) -> Any:
    """A hashable form that tells apart what ``==`` would not (1 vs True, 1.5 vs 1.50)."""
    if isinstance(value, tuple):
        return tuple(freeze(v) for v in value)
    if isinstance(value, list):
        return ("list", tuple(freeze(v) for v in value))
    if isinstance(value, MapValue):
        return ("map", frozenset((freeze(k), freeze(v)) for k, v in value.entries))
    if isinstance(value, decimal.Decimal):
        return ("decimal", value.as_tuple())
    if isinstance(value, bool):
        return ("bool", value)
    if isinstance(value, float):
        return ("float", value)
    if isinstance(value, (bytes, bytearray)):
        return ("bytes", bytes(value))
    return value
