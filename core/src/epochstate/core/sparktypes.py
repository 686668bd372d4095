"""Spark SQL data types as found in checkpoint schema files, and decoded values.

Decoded values use plain Python objects, chosen so they are exact and comparable:

===================== ==========================================================
Spark type            Python value
===================== ==========================================================
boolean               ``bool``
byte/short/int/long   ``int``
float/double          ``float``
decimal(p, s)         ``decimal.Decimal`` (exact, with scale ``s``)
string                ``str``
binary                ``bytes``
date                  ``int`` days since 1970-01-01
timestamp(_ntz)       ``int`` microseconds since 1970-01-01T00:00:00
struct                ``tuple`` of field values
array                 ``list`` of element values
map                   :class:`MapValue`
any, when null        ``None``
===================== ==========================================================
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, TypeAlias

from epochstate.core import jsontext

AtomicName = Literal[
    "boolean",
    "byte",
    "short",
    "integer",
    "long",
    "float",
    "double",
    "string",
    "binary",
    "date",
    "timestamp",
    "timestamp_ntz",
    "null",
]
ATOMIC_NAMES: frozenset[str] = frozenset(AtomicName.__args__)  # type: ignore[attr-defined]


class SchemaError(ValueError):
    """A schema (JSON) that is not a Spark SQL type we understand."""


@dataclass(frozen=True, slots=True)
class AtomicType:
    name: AtomicName


@dataclass(frozen=True, slots=True)
class DecimalType:
    precision: int
    scale: int


@dataclass(frozen=True, slots=True)
class StructField:
    name: str
    type: SparkType
    nullable: bool = True


@dataclass(frozen=True, slots=True)
class StructType:
    fields: tuple[StructField, ...]

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(f.name for f in self.fields)


@dataclass(frozen=True, slots=True)
class ArrayType:
    element: SparkType
    contains_null: bool = True


@dataclass(frozen=True, slots=True)
class MapType:
    key: SparkType
    value: SparkType
    value_contains_null: bool = True


SparkType: TypeAlias = AtomicType | DecimalType | StructType | ArrayType | MapType


@dataclass(frozen=True, slots=True)
class MapValue:
    """A decoded map: its entries in storage order (keys may be unhashable)."""

    entries: tuple[tuple[Any, Any], ...]


# Spark's JSON names that differ from the dataclass names.
_JSON_ALIASES = {"int": "integer", "timestamp_ltz": "timestamp", "void": "null"}


MAX_NESTING = 100
"""Deepest nesting of structs, arrays and maps accepted (readers and codecs recurse
once or twice per level; Spark's schemas nest a few levels)."""
MAX_DECIMAL_PRECISION = 38


def _decimal(precision: int, scale: int) -> DecimalType:
    if not 1 <= precision <= MAX_DECIMAL_PRECISION or not 0 <= scale <= precision:
        raise SchemaError(f"decimal({precision},{scale}) is not a Spark decimal type")
    return DecimalType(precision, scale)


def parse_type(obj: Any, _depth: int = 0) -> SparkType:
    """Parse Spark's JSON form of a data type (``DataType.json``).

    Raises:
        SchemaError: a type that is not a Spark SQL type we understand (also a
            decimal beyond precision 38, or nesting deeper than :data:`MAX_NESTING`).
        ValueError, KeyError, TypeError: JSON that is not a data type's form.
    """
    if _depth > MAX_NESTING:
        raise SchemaError(f"data type nested deeper than {MAX_NESTING} levels")
    nested = _depth + 1
    if isinstance(obj, str):
        name = _JSON_ALIASES.get(obj, obj)
        if name in ATOMIC_NAMES:
            return AtomicType(name)  # type: ignore[arg-type]
        if name.startswith("decimal(") and name.endswith(")"):
            precision, scale = name[len("decimal(") : -1].split(",")
            return _decimal(int(precision), int(scale))
        if name == "decimal":
            return DecimalType(10, 0)
        if name.startswith("char(") or name.startswith("varchar("):
            return AtomicType("string")
        raise SchemaError(f"unsupported Spark data type {name!r}")
    if isinstance(obj, dict):
        kind = obj.get("type")
        if kind == "struct":
            return StructType(tuple(_field(f, nested) for f in obj.get("fields", [])))
        if kind == "array":
            return ArrayType(parse_type(obj["elementType"], nested), bool(obj.get("containsNull", True)))
        if kind == "map":
            return MapType(
                parse_type(obj["keyType"], nested),
                parse_type(obj["valueType"], nested),
                bool(obj.get("valueContainsNull", True)),
            )
        if kind == "udt" and "sqlType" in obj:
            return parse_type(obj["sqlType"], nested)
    raise SchemaError(f"unsupported Spark data type {obj!r}")


def _field(obj: Any, depth: int) -> StructField:
    name = obj["name"]
    if not isinstance(name, str):
        raise SchemaError(f"a struct field named {name!r}, not a string")
    return StructField(name, parse_type(obj["type"], depth), bool(obj.get("nullable", True)))


def parse_struct(text_or_obj: str | dict[str, Any]) -> StructType:
    """Parse a Spark struct schema from its JSON text or decoded JSON."""
    obj = jsontext.loads(text_or_obj) if isinstance(text_or_obj, str) else text_or_obj
    parsed = parse_type(obj)
    if not isinstance(parsed, StructType):
        raise SchemaError(f"expected a struct schema, got {obj!r}")
    return parsed


def type_to_json(t: SparkType) -> Any:
    """Spark's JSON form of ``t`` (the inverse of :func:`parse_type`)."""
    if isinstance(t, AtomicType):
        return t.name
    if isinstance(t, DecimalType):
        return f"decimal({t.precision},{t.scale})"
    if isinstance(t, StructType):
        return {
            "type": "struct",
            "fields": [
                {"name": f.name, "type": type_to_json(f.type), "nullable": f.nullable, "metadata": {}}
                for f in t.fields
            ],
        }
    if isinstance(t, ArrayType):
        return {"type": "array", "elementType": type_to_json(t.element), "containsNull": t.contains_null}
    return {
        "type": "map",
        "keyType": type_to_json(t.key),
        "valueType": type_to_json(t.value),
        "valueContainsNull": t.value_contains_null,
    }


def type_to_simple_string(t: SparkType) -> str:
    """Spark's short form, e.g. ``struct<k:bigint,s:string>``, for humans."""
    if isinstance(t, AtomicType):
        return {
            "integer": "int",
            "long": "bigint",
            "short": "smallint",
            "byte": "tinyint",
            "null": "void",
        }.get(t.name, t.name)
    if isinstance(t, DecimalType):
        return f"decimal({t.precision},{t.scale})"
    if isinstance(t, StructType):
        inner = ",".join(f"{f.name}:{type_to_simple_string(f.type)}" for f in t.fields)
        return f"struct<{inner}>"
    if isinstance(t, ArrayType):
        return f"array<{type_to_simple_string(t.element)}>"
    return f"map<{type_to_simple_string(t.key)},{type_to_simple_string(t.value)}>"
