"""Spark values and the daemon's answers in one JSON form, so that a dump written by
one Spark release's driver compares with what the daemon serves.

Standard library only: this module runs in every release's driver. Structs (a
PySpark ``Row``, the client's ``Struct``) and dicts become JSON objects (a struct
whose field names repeat, its ``[name, value]`` pairs), tuples lists; the types
JSON lacks become one-key objects: ``{"$timestamp": iso}`` (naive UTC),
``{"$date": iso}``, ``{"$decimal": str}``, ``{"$binary": hex}``. ``decode`` turns
those back into Python values, as key arguments for the client.
"""

from __future__ import annotations

import datetime as dt
import json
from decimal import Decimal
from typing import Any, cast


def _struct(fields: list[tuple[str, Any]]) -> Any:
    """A struct as an object, name -> value; as its ``[name, value]`` pairs in order when
    a name repeats (an aggregation buffer may have two ``count`` fields)."""
    names = [name for name, _ in fields]
    if len(set(names)) == len(names):
        return {name: encode(v) for name, v in fields}
    return [[name, encode(v)] for name, v in fields]


def encode(value: Any) -> Any:
    """``value`` (a Spark ``Row``, a client result, or anything inside them) as JSON data."""
    if isinstance(value, tuple) and isinstance(getattr(type(value), "fields", None), property):
        return _struct(list(cast(Any, value).fields))  # the client's Struct: (name, value) pairs
    if isinstance(value, tuple) and hasattr(value, "__fields__"):  # a PySpark Row
        return _struct(list(zip(value.__fields__, value, strict=True)))
    if isinstance(value, dict):
        return {str(k): encode(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [encode(v) for v in value]
    if isinstance(value, dt.datetime):
        if value.tzinfo is not None:
            value = value.astimezone(dt.timezone.utc).replace(tzinfo=None)
        return {"$timestamp": value.isoformat()}
    if isinstance(value, dt.date):
        return {"$date": value.isoformat()}
    if isinstance(value, Decimal):
        return {"$decimal": str(value)}
    if isinstance(value, (bytes, bytearray)):
        return {"$binary": bytes(value).hex()}
    return value


def decode(data: Any) -> Any:
    """The Python value of :func:`encode`'s output (structs as dicts)."""
    if isinstance(data, list):
        return [decode(v) for v in data]
    if isinstance(data, dict):
        if len(data) == 1:
            ((tag, text),) = data.items()
            if tag == "$timestamp":
                return dt.datetime.fromisoformat(text)
            if tag == "$date":
                return dt.date.fromisoformat(text)
            if tag == "$decimal":
                return Decimal(text)
            if tag == "$binary":
                return bytes.fromhex(text)
        return {k: decode(v) for k, v in data.items()}
    return data


def canon(data: Any) -> str:
    """A string for comparing and indexing :func:`encode`'s output."""
    return json.dumps(data, sort_keys=True)
