"""The compiled transcoder against the reference path it must equal byte for byte."""

from __future__ import annotations

import random
import struct
from decimal import Decimal
from typing import Any

import pytest

from epochstate.core.sparktypes import AtomicType, DecimalType, SparkType, StructField, StructType
from epochstate.daemon.codec import keycodec
from epochstate.daemon.codec.records import RecordEncoder
from epochstate.daemon.ingest.transcoder import Transcoder
from epochstate.daemon.sources.changes import RowFraming
from epochstate.daemon.sources.errors import CorruptRow
from epochstate.daemon.sources.rocksdb.rows import StateRowDecoder
from epochstate.daemon.sources.rows.unsaferow import RowDecoder
from tests.sources.test_unsaferow import Slot, fixed, row, var

_FIXED = {"boolean": "?", "byte": "b", "short": "h", "integer": "i", "date": "i", "float": "f"}
_FIXED.update({"long": "q", "timestamp": "q", "timestamp_ntz": "q", "double": "d"})


def slot(t: SparkType, value: Any) -> Slot:
    if value is None:
        return None
    if isinstance(t, StructType):
        return var(unsafe_row(t, value))
    if isinstance(t, DecimalType):
        unscaled = int(value.scaleb(t.scale))
        if t.precision <= 18:
            return fixed("q", unscaled)
        return var(unscaled.to_bytes(16, "big", signed=True))
    assert isinstance(t, AtomicType)
    if t.name == "string":
        return var(value)  # raw bytes: may be invalid UTF-8 on purpose
    if t.name == "binary":
        return var(value)
    if t.name == "null":
        return fixed("q", 0)
    return fixed(_FIXED[t.name], value)


def unsafe_row(schema: StructType, values: tuple[Any, ...]) -> bytes:
    return row(*(slot(f.type, v) for f, v in zip(schema.fields, values, strict=True)))


def sample(t: SparkType, rng: random.Random, nulls: bool) -> Any:
    if nulls and rng.random() < 0.2:
        return None
    if isinstance(t, StructType):
        return tuple(sample(f.type, rng, nulls) for f in t.fields)
    if isinstance(t, DecimalType):
        return Decimal(rng.randrange(-(10**15), 10**15)).scaleb(-t.scale)
    assert isinstance(t, AtomicType)
    name = t.name
    if name == "string":
        return rng.choice([b"", b"user-1", "ü€😀".encode(), b"a\x00b" * 50, b"\xff\xfebad", b"x" * 200])
    if name == "binary":
        return bytes(rng.randrange(256) for _ in range(rng.randrange(150)))
    if name == "boolean":
        return rng.random() < 0.5
    if name in ("float", "double"):
        return rng.choice([0.0, -0.0, 1.5, -2.25e30, float("inf")])
    if name in ("byte",):
        return rng.randrange(-128, 128)
    if name in ("short",):
        return rng.randrange(-(2**15), 2**15)
    if name in ("integer", "date"):
        return rng.choice([0, 1, -1, 63, 64, -65, 2**31 - 1, -(2**31)])
    if name == "null":
        return 0
    return rng.choice([0, 1, -1, 127, 128, 2**63 - 1, -(2**63), rng.randrange(-(2**40), 2**40)])


ATOMS = ["long", "integer", "short", "byte", "double", "float", "boolean", "string", "binary", "date"]
ATOMS += ["timestamp", "timestamp_ntz", "null"]
KEY = StructType(
    (
        StructField("s", AtomicType("string")),
        StructField("n", AtomicType("long")),
        StructField("b", AtomicType("boolean")),
        StructField("d", AtomicType("double")),
        StructField("dec", DecimalType(10, 2)),
    )
)
VALUE = StructType(
    (
        *(StructField(f"f_{n}", AtomicType(n)) for n in ATOMS),  # type: ignore[arg-type]
        StructField("small", DecimalType(12, 3)),
        StructField("big", DecimalType(30, 5)),
        StructField(
            "nested",
            StructType((StructField("a", AtomicType("long")), StructField("t", AtomicType("string")))),
        ),
    )
)


def reference(key_schema: StructType, value_schema: StructType, framing: RowFraming) -> Any:
    if framing.version_byte:
        keys = StateRowDecoder(key_schema, framing.num_cols_prefix_key).decode
        values = StateRowDecoder(value_schema).decode
    else:
        keys, values = RowDecoder(key_schema).decode, RowDecoder(value_schema).decode
    present = RecordEncoder(key_schema, value_schema).present

    def run(partition: int, raw_key: bytes, raw_value: bytes) -> tuple[bytes, bytes]:
        key = keys(raw_key)
        return keycodec.encode_fields(key), present(partition, key, values(raw_value))

    return run, keys, values


def frame(raw: bytes, framing: RowFraming, schema: StructType, values: tuple[Any, ...]) -> bytes:
    if not framing.version_byte:
        return raw
    n = framing.num_cols_prefix_key
    if n == 0:
        return b"\x00" + raw
    head = StructType(schema.fields[:n])
    rest = StructType(schema.fields[n:])
    first = b"\x00" + unsafe_row(head, values[:n])
    return struct.pack("<i", len(first)) + first + b"\x00" + unsafe_row(rest, values[n:])


@pytest.mark.parametrize(
    "framing",
    [RowFraming(), RowFraming(version_byte=True), RowFraming(version_byte=True, num_cols_prefix_key=2)],
)
@pytest.mark.parametrize("nulls", [False, True])
def test_transcoder_writes_the_reference_bytes(framing: RowFraming, nulls: bool) -> None:
    rng = random.Random(f"{framing}{nulls}")
    run, keys, values = reference(KEY, VALUE, framing)
    decoded: list[bytes] = []

    def counted(raw: bytes) -> tuple[Any, ...]:
        decoded.append(raw)
        result: tuple[Any, ...] = values(raw)
        return result

    transcoder = Transcoder(KEY, VALUE, framing, keys, counted)
    batches: dict[int, list[tuple[bytes, bytes | None]]] = {}
    expected: dict[int, dict[bytes, bytes | None]] = {}
    for _ in range(200):
        key = tuple(sample(f.type, rng, nulls) for f in KEY.fields)
        value = tuple(sample(f.type, rng, nulls) for f in VALUE.fields)
        raw_key = frame(unsafe_row(KEY, key), framing, KEY, key)
        raw_value = frame(unsafe_row(VALUE, value), RowFraming(framing.version_byte), VALUE, value)
        partition = rng.choice([0, 1, 199, 2**31 - 1])
        assert transcoder.row(partition, raw_key, raw_value) == run(partition, raw_key, raw_value)
        assert transcoder.key(raw_key) == run(partition, raw_key, raw_value)[0]
        removal = rng.random() < 0.2
        batches.setdefault(partition, []).append((raw_key, None if removal else raw_value))
        encoded, record = run(partition, raw_key, raw_value)
        expected.setdefault(partition, {})[encoded] = None if removal else record
    # The loop over many rows gives what the row-at-a-time function gives.
    for partition, rows in batches.items():
        out: dict[bytes, bytes | None] = {}
        transcoder.rows(partition, rows, out)
        assert out == expected[partition]
    # Rows without nulls take the compiled path, which decodes no value.
    assert bool(decoded) == nulls


@pytest.mark.parametrize("framing", [RowFraming(), RowFraming(version_byte=True)])
def test_damaged_rows_raise_what_the_reference_raises(framing: RowFraming) -> None:
    rng = random.Random(7)
    run, keys, values = reference(KEY, VALUE, framing)
    transcoder = Transcoder(KEY, VALUE, framing, keys, values)
    key = tuple(sample(f.type, rng, False) for f in KEY.fields)
    value = tuple(sample(f.type, rng, False) for f in VALUE.fields)
    raw_key = frame(unsafe_row(KEY, key), framing, KEY, key)
    raw_value = frame(unsafe_row(VALUE, value), framing, VALUE, value)
    damaged = [
        raw_value[:-9],
        raw_value[:12],
        b"",
        b"\x01" + raw_value[1:] if framing.version_byte else b"\x00",
    ]
    damaged.append(raw_value[:-8] + struct.pack("<Q", (900 << 32) | 8))
    for bad in damaged:
        out: dict[bytes, bytes | None] = {}
        try:
            expected = run(0, raw_key, bad)
        except CorruptRow as err:
            with pytest.raises(CorruptRow, match=str(err)[:20]):
                transcoder.row(0, raw_key, bad)
            with pytest.raises(CorruptRow, match=str(err)[:20]):
                transcoder.rows(0, [(raw_key, raw_value), (raw_key, bad)], out)
        else:
            assert transcoder.row(0, raw_key, bad) == expected
            transcoder.rows(0, [(raw_key, bad)], out)
            assert out == dict([expected])
