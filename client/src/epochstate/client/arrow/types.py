"""Arrow types of Spark's SQL types, as Spark's own state reader gives them.

``spark.read.format("statestore")...toArrow()`` maps each Spark type to the Arrow
type below; a store's table has the same columns as Spark's reader: ``key`` and
``value`` structs (the store's key and value schemas, every field in schema order)
and ``partition_id``. Unlike Spark's reader, a struct whose schema repeats a field
name (an aggregation buffer's ``count``, ``sum``, ``count``) keeps every field:
Arrow allows repeated names, Spark refuses to convert them.

===================== ======================================================
Spark type            Arrow type
===================== ======================================================
boolean               ``bool``
byte/short/int/long   ``int8``/``int16``/``int32``/``int64``
float/double          ``float32``/``float64``
decimal(p, s)         ``decimal128(p, s)``
string/binary         ``string``/``binary``
date                  ``date32``
timestamp             ``timestamp[us, tz=UTC]`` (Spark: the session's time zone)
timestamp_ntz         ``timestamp[us]``
null (void)           ``null``
array<t>              ``list<element: t>``
map<k, v>             ``map<k, v>``
struct                ``struct`` (field names, order and nullability kept)
===================== ======================================================
"""

from __future__ import annotations

import pyarrow as pa  # type: ignore[import-untyped]

from epochstate.client.client import StoreSchema
from epochstate.core.sparktypes import ArrayType, AtomicType, DecimalType, MapType, SparkType, StructType

_ATOMIC: dict[str, pa.DataType] = {
    "boolean": pa.bool_(),
    "byte": pa.int8(),
    "short": pa.int16(),
    "integer": pa.int32(),
    "long": pa.int64(),
    "float": pa.float32(),
    "double": pa.float64(),
    "string": pa.string(),
    "binary": pa.binary(),
    "date": pa.date32(),
    "timestamp": pa.timestamp("us", tz="UTC"),
    "timestamp_ntz": pa.timestamp("us"),
    "null": pa.null(),
}

# Spark's reader names a list's element field "element" (Arrow's default is "item").
LIST_ELEMENT = "element"

# What a change of the Changes stream did to its key.
CHANGE_TYPES = ("upsert", "delete")


def arrow_type(t: SparkType) -> pa.DataType:
    """The Arrow type of Spark type ``t`` (see the module docstring)."""
    if isinstance(t, AtomicType):
        return _ATOMIC[t.name]
    if isinstance(t, DecimalType):
        return pa.decimal128(t.precision, t.scale)
    if isinstance(t, StructType):
        return pa.struct([pa.field(f.name, arrow_type(f.type), f.nullable) for f in t.fields])
    if isinstance(t, ArrayType):
        return pa.list_(pa.field(LIST_ELEMENT, arrow_type(t.element), t.contains_null))
    assert isinstance(t, MapType)
    return pa.map_(arrow_type(t.key), pa.field("value", arrow_type(t.value), t.value_contains_null))


def state_schema(store: StoreSchema) -> pa.Schema:
    """The columns of one epoch of ``store``: ``key``, ``value``, ``partition_id``
    (Spark's reader's columns and types)."""
    return pa.schema(
        [
            pa.field("key", arrow_type(store.key), nullable=True),
            pa.field("value", arrow_type(store.value), nullable=True),
            pa.field("partition_id", pa.int32(), nullable=True),
        ]
    )


def changes_schema(store: StoreSchema) -> pa.Schema:
    """The columns of a feed of changes of ``store``: ``epoch``, ``change_type``
    (``upsert`` or ``delete``), then those of :func:`state_schema` (``value`` is null
    for a delete), as Spark's ``readChangeFeed`` has ``batch_id`` and ``change_type``
    before them."""
    state = state_schema(store)
    return pa.schema(
        [
            pa.field("epoch", pa.int64(), nullable=False),
            pa.field("change_type", pa.string(), nullable=False),
            *state,
        ]
    )
