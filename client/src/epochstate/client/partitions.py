"""The Spark partition of a key as the client sends it (an ``epochstate.v1.Row``).

The key the client built for the daemon (:func:`~epochstate.client.values.to_row`)
is turned into the decoded values of :mod:`epochstate.core.sparktypes` and hashed
by :mod:`epochstate.core.partitioner`, Spark's own partitioner. A field given in
a form the daemon would parse itself (a date or timestamp as ISO text, a decimal
as an int) is parsed here the same way first.
"""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from typing import Any

from epochstate.core.partitioner import partition_of
from epochstate.core.sparktypes import (
    ArrayType,
    AtomicType,
    DecimalType,
    MapType,
    MapValue,
    SparkType,
    StructType,
)
from epochstate.v1 import epochstate_pb2 as pb

_EPOCH_DATE = dt.date(1970, 1, 1)
_EPOCH_DT = dt.datetime(1970, 1, 1)


def _from_text(text: str, t: AtomicType) -> Any:
    if t.name == "date":
        return (dt.date.fromisoformat(text[:10]) - _EPOCH_DATE).days
    if t.name in ("timestamp", "timestamp_ntz"):
        moment = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
        if moment.tzinfo is not None:
            moment = moment.astimezone(dt.timezone.utc).replace(tzinfo=None)
        delta = moment - _EPOCH_DT
        return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds
    return text


def decoded(value: pb.Value, t: SparkType) -> Any:
    """``value`` of Spark type ``t`` as :mod:`epochstate.core.sparktypes` decodes it.

    Raises:
        ValueError: a value the daemon would refuse for ``t`` (the read then fails
            with its BAD_KEY from the daemon the key is sent to).
    """
    kind = value.WhichOneof("kind")
    if kind is None or kind == "null":
        return None
    if isinstance(t, StructType):
        if kind != "struct":
            raise ValueError(f"a struct field needs a struct, got {kind}")
        return tuple(decoded(v, f.type) for v, f in zip(value.struct.fields, t.fields, strict=True))
    if isinstance(t, ArrayType):
        return [decoded(v, t.element) for v in value.array.elements]
    if isinstance(t, MapType):
        pairs = zip(value.map.keys, value.map.values, strict=True)
        return MapValue(tuple((decoded(k, t.key), decoded(v, t.value)) for k, v in pairs))
    if isinstance(t, DecimalType):
        return Decimal(value.decimal) if kind == "decimal" else Decimal(getattr(value, kind))
    if kind == "date":
        return value.date
    if kind == "timestamp_micros":
        return value.timestamp_micros
    if kind == "string":
        return _from_text(value.string, t)
    return getattr(value, kind)


def key_partition(key: pb.Row, schema: StructType, num_partitions: int, fields: int | None = None) -> int:
    """The Spark partition of ``key`` (one value per field of ``schema``), hashed over
    its first ``fields`` fields (None: all of them), those Spark shuffles the store's
    rows by (:func:`epochstate.core.shuffle_keys.shuffle_fields`).

    Raises:
        ValueError: the key does not fit ``schema``.
    """
    if len(key.fields) != len(schema.fields):
        raise ValueError(f"{len(key.fields)} key fields for a key schema of {len(schema.fields)}")
    shuffled = schema if fields is None else StructType(schema.fields[:fields])
    try:
        values = [decoded(v, f.type) for v, f in zip(key.fields, shuffled.fields, strict=False)]
        return partition_of(values, shuffled, num_partitions)
    except (TypeError, ArithmeticError) as error:
        raise ValueError(f"the key does not fit its schema: {error}") from error
