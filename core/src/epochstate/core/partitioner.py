"""Spark's partitioner: the Spark partition a state key falls in.

A stateful operator's input is shuffled by ``HashPartitioning`` over its key
columns, so the state of a key lives in partition
``pmod(Murmur3Hash(key columns, seed 42), numPartitions)``. This module computes
that hash exactly as Spark's ``Murmur3Hash`` expression does, on the decoded
values of :mod:`epochstate.core.sparktypes` (dates as days, timestamps as
microseconds, decimals as ``Decimal``, structs as tuples):

- each column's hash is the seed of the next one; a null leaves the seed as it is;
- boolean, byte, short, int and date hash as a 32-bit int; long, timestamp and
  timestamp_ntz as a 64-bit long (low word, then high word);
- float and double hash their IEEE bits, with ``-0.0`` as ``0`` and every NaN as
  Java's canonical NaN (``floatToIntBits``/``doubleToLongBits``);
- decimals of precision <= 18 hash their unscaled value as a long; wider ones the
  unscaled value's minimal two's-complement big-endian bytes;
- strings (UTF-8) and binary hash as bytes with Spark's own tail: each byte past
  the last full 4-byte word is mixed as a whole block, sign-extended, unlike
  standard MurmurHash3 (Spark keeps it for compatibility);
- structs, arrays and maps hash their fields, elements, and keys then values,
  in order, each seeding the next.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Sequence
from decimal import Decimal
from typing import Any

from epochstate.core.sparktypes import (
    ArrayType,
    AtomicType,
    DecimalType,
    MapType,
    MapValue,
    SparkType,
    StructType,
)

SEED = 42
_MASK = 0xFFFFFFFF
_C1 = 0xCC9E2D51
_C2 = 0x1B873593
# Decimal.MAX_LONG_DIGITS: up to this precision Spark keeps a decimal's unscaled value in a long.
_MAX_LONG_DIGITS = 18
_INTS = frozenset({"boolean", "byte", "short", "integer", "date"})
_LONGS = frozenset({"long", "timestamp", "timestamp_ntz"})


def _rotl(value: int, bits: int) -> int:
    return ((value << bits) | (value >> (32 - bits))) & _MASK


def _mix_k1(k1: int) -> int:
    k1 = (k1 * _C1) & _MASK
    k1 = _rotl(k1, 15)
    return (k1 * _C2) & _MASK


def _mix_h1(h1: int, k1: int) -> int:
    h1 = _rotl(h1 ^ k1, 13)
    return (h1 * 5 + 0xE6546B64) & _MASK


def _fmix(h1: int, length: int) -> int:
    h1 ^= length
    h1 ^= h1 >> 16
    h1 = (h1 * 0x85EBCA6B) & _MASK
    h1 ^= h1 >> 13
    h1 = (h1 * 0xC2B2AE35) & _MASK
    return h1 ^ (h1 >> 16)


def _signed(value: int) -> int:
    value &= _MASK
    return value - (1 << 32) if value & 0x80000000 else value


def hash_int(value: int, seed: int) -> int:
    """Spark's ``Murmur3_x86_32.hashInt``: a signed 32-bit result."""
    return _signed(_fmix(_mix_h1(seed & _MASK, _mix_k1(value & _MASK)), 4))


def hash_long(value: int, seed: int) -> int:
    """Spark's ``Murmur3_x86_32.hashLong``: the low 32 bits, then the high 32 bits."""
    value &= 0xFFFFFFFFFFFFFFFF
    h1 = _mix_h1(seed & _MASK, _mix_k1(value & _MASK))
    h1 = _mix_h1(h1, _mix_k1(value >> 32))
    return _signed(_fmix(h1, 8))


def hash_bytes(data: bytes, seed: int) -> int:
    """Spark's ``Murmur3_x86_32.hashUnsafeBytes`` (not standard MurmurHash3 on the tail)."""
    h1 = seed & _MASK
    aligned = len(data) - len(data) % 4
    for (word,) in struct.iter_unpack("<I", data[:aligned]):
        h1 = _mix_h1(h1, _mix_k1(word))
    for byte in data[aligned:]:
        h1 = _mix_h1(h1, _mix_k1(byte - 256 if byte > 127 else byte))  # a Java byte: signed
    return _signed(_fmix(h1, len(data)))


def _float_bits(value: float) -> int:
    if value == 0.0:
        return 0  # -0.0 too
    if math.isnan(value):
        return 0x7FC00000
    return int(struct.unpack("<I", struct.pack("<f", value))[0])


def _double_bits(value: float) -> int:
    if value == 0.0:
        return 0
    if math.isnan(value):
        return 0x7FF8000000000000
    return int(struct.unpack("<Q", struct.pack("<d", value))[0])


def _unscaled(value: Any, t: DecimalType) -> int:
    scaled = Decimal(value).scaleb(t.scale)
    return int(scaled.to_integral_value())


def _twos_complement(value: int) -> bytes:
    """Java's ``BigInteger.toByteArray``: minimal big-endian two's complement."""
    length = (value + (value < 0)).bit_length() // 8 + 1
    return value.to_bytes(length, "big", signed=True)


def hash_value(value: Any, t: SparkType, seed: int) -> int:
    """The hash of one decoded ``value`` of Spark type ``t``, seeded with ``seed``.

    Raises:
        TypeError, ValueError: ``value`` is not a decoded value of type ``t``.
    """
    if value is None:
        return seed
    if isinstance(t, AtomicType):
        name = t.name
        if name in _INTS:
            return hash_int(int(value), seed)
        if name in _LONGS:
            return hash_long(int(value), seed)
        if name == "double":
            return hash_long(_double_bits(float(value)), seed)
        if name == "float":
            return hash_int(_float_bits(float(value)), seed)
        if name == "string":
            if not isinstance(value, str):
                raise TypeError(f"a string key field needs str, got {type(value).__name__}")
            return hash_bytes(value.encode("utf-8", "surrogatepass"), seed)
        if name == "binary":
            return hash_bytes(bytes(value), seed)
        if name == "null":
            return seed
        raise TypeError(f"cannot hash Spark type {name!r}")
    if isinstance(t, DecimalType):
        unscaled = _unscaled(value, t)
        if t.precision <= _MAX_LONG_DIGITS:
            return hash_long(unscaled, seed)
        return hash_bytes(_twos_complement(unscaled), seed)
    if isinstance(t, StructType):
        for field, item in zip(t.fields, value, strict=True):
            seed = hash_value(item, field.type, seed)
        return seed
    if isinstance(t, ArrayType):
        for item in value:
            seed = hash_value(item, t.element, seed)
        return seed
    if isinstance(t, MapType):
        entries = value.entries if isinstance(value, MapValue) else tuple(dict(value).items())
        for key, item in entries:
            seed = hash_value(key, t.key, seed)
            seed = hash_value(item, t.value, seed)
        return seed
    raise TypeError(f"not a Spark type: {t!r}")


def spark_hash(values: Sequence[Any], schema: StructType, seed: int = SEED) -> int:
    """``hash(col1, col2, ...)`` in Spark SQL: Murmur3Hash over the columns of ``schema``."""
    if len(values) != len(schema.fields):
        raise ValueError(f"{len(values)} values for {len(schema.fields)} key fields")
    return hash_value(tuple(values), schema, seed)


def partition_of(values: Sequence[Any], schema: StructType, num_partitions: int) -> int:
    """The Spark partition (``0 <= p < num_partitions``) of a key of ``schema``."""
    if num_partitions < 1:
        raise ValueError(f"num_partitions must be >= 1, got {num_partitions}")
    return spark_hash(values, schema) % num_partitions  # Python's % is pmod for a positive divisor
