"""The wire encoders of daemon/codec (wire.py, records.py) against protobuf's own message classes."""

from __future__ import annotations

import random
from decimal import Decimal
from typing import Any

import pytest

from epochstate.core.sparktypes import (
    ArrayType,
    AtomicType,
    DecimalType,
    MapType,
    MapValue,
    SparkType,
    StructField,
    StructType,
)
from epochstate.daemon.codec.records import RecordEncoder, one_record_response, response_bytes, response_tail
from epochstate.v1 import epochstate_pb2 as pb


def expected(value: Any, t: SparkType) -> pb.Value:
    """The Value message built field by field with the generated classes."""
    if value is None:
        return pb.Value(null=True)
    if isinstance(t, StructType):
        return pb.Value(
            struct=pb.Row(fields=[expected(v, f.type) for v, f in zip(value, t.fields, strict=True)])
        )
    if isinstance(t, ArrayType):
        return pb.Value(array=pb.Array(elements=[expected(v, t.element) for v in value]))
    if isinstance(t, MapType):
        return pb.Value(
            map=pb.Map(
                keys=[expected(k, t.key) for k, _ in value.entries],
                values=[expected(v, t.value) for _, v in value.entries],
            )
        )
    if isinstance(t, DecimalType):
        return pb.Value(decimal=str(value))
    name = t.name
    if name in ("byte", "short", "integer", "long"):
        return pb.Value(int=value)
    if name in ("float", "double"):
        return pb.Value(float=value)
    if name == "boolean":
        return pb.Value(bool=value)
    if name == "string":
        return pb.Value(string=value)
    if name == "binary":
        return pb.Value(binary=value)
    if name == "date":
        return pb.Value(date=value)
    return pb.Value(timestamp_micros=value)


def sample(t: SparkType, rng: random.Random, depth: int = 0) -> Any:
    if rng.random() < 0.15 or t == AtomicType("null"):
        return None
    if isinstance(t, StructType):
        return tuple(sample(f.type, rng, depth + 1) for f in t.fields)
    if isinstance(t, ArrayType):
        return [sample(t.element, rng, depth + 1) for _ in range(rng.randrange(4))]
    if isinstance(t, MapType):
        return MapValue(tuple((f"k{i}", sample(t.value, rng, depth + 1)) for i in range(rng.randrange(3))))
    if isinstance(t, DecimalType):
        return Decimal(rng.randrange(-(10**12), 10**12)).scaleb(-t.scale)
    name = t.name
    if name == "long":
        return rng.choice([0, 1, -1, 2**63 - 1, -(2**63), rng.randrange(-(2**40), 2**40)])
    if name in ("byte", "short", "integer"):
        return rng.randrange(-100, 100)
    if name in ("float", "double"):
        return rng.choice([0.0, -0.0, 1.5, -2.25e300, float("inf")])
    if name == "boolean":
        return rng.random() < 0.5
    if name == "string":
        return rng.choice(["", "x", "ü€😀", "a\x00b" * 50])
    if name == "binary":
        return bytes(rng.randrange(256) for _ in range(rng.randrange(200)))
    if name == "date":
        return rng.randrange(-40_000, 40_000)
    return rng.randrange(-(2**62), 2**62)


ATOMS = [
    "long",
    "integer",
    "short",
    "byte",
    "double",
    "float",
    "boolean",
    "string",
    "binary",
    "date",
    "timestamp",
    "timestamp_ntz",
    "null",
]
SCHEMA = StructType(
    (
        *(StructField(f"f_{n}", AtomicType(n)) for n in ATOMS),  # type: ignore[arg-type]
        StructField("dec", DecimalType(10, 2)),
        StructField("big", DecimalType(30, 5)),
        StructField(
            "nested",
            StructType(
                (StructField("a", AtomicType("long")), StructField("b", ArrayType(AtomicType("string"))))
            ),
        ),
        StructField("m", MapType(AtomicType("string"), ArrayType(AtomicType("double")))),
    )
)


@pytest.mark.parametrize("seed", range(20))
def test_records_parse_to_the_expected_messages(seed: int) -> None:
    rng = random.Random(seed)
    key_schema = StructType((StructField("k", AtomicType("string")), StructField("n", AtomicType("long"))))
    encoder = RecordEncoder(key_schema, SCHEMA)
    key = (rng.choice(["a", "", "ü"]), rng.randrange(-5, 5))
    value = tuple(sample(f.type, rng) for f in SCHEMA.fields)
    partition = rng.randrange(0, 3)
    record = pb.Record.FromString(encoder.present(partition, key, value))
    assert record == pb.Record(
        key=expected(key, key_schema).struct,
        value=expected(value, SCHEMA).struct,
        found=True,
        partition=partition,
    )
    absent = pb.Record.FromString(encoder.absent(key))
    assert absent == pb.Record(key=expected(key, key_schema).struct, found=False)
    assert absent.HasField("key") and not absent.HasField("value")


@pytest.mark.parametrize("seed", range(20))
def test_compiled_writer_writes_the_reference_bytes(seed: int) -> None:
    rng = random.Random(seed)
    fields = (StructField("k", AtomicType("string")), StructField("n", AtomicType("long")))
    encoder = RecordEncoder(StructType((*fields, StructField("b", SCHEMA))), SCHEMA)
    for _ in range(20):
        text = rng.choice(["a", "", "ü", "x" * 300, None])
        key = (text, sample(AtomicType("long"), rng), sample(SCHEMA, rng))
        value = tuple(sample(f.type, rng) for f in SCHEMA.fields)
        partition = rng.choice([0, 1, 199, 2**31 - 1])
        assert encoder.present(partition, key, value) == encoder.reference_present(partition, key, value)


def test_response_framing() -> None:
    encoder = RecordEncoder(
        StructType((StructField("k", AtomicType("long")),)),
        StructType((StructField("v", AtomicType("long")),)),
    )
    records = [encoder.present(1, (i,), (i * 10,)) for i in range(3)]
    response = pb.ScanResponse.FromString(response_bytes(-1 + 2**40, records, token=b"\x00tok"))
    assert response.epoch == 2**40 - 1 and response.next_page_token == b"\x00tok"
    assert [r.value.fields[0].int for r in response.records] == [0, 10, 20]
    assert pb.GetResponse.FromString(response_bytes(0, records[:1])).record.key.fields[0].int == 0
    query = "6f1c1bd4-0dd5-4be9-a1a4-7cfb5a3c7a43"
    for message in (pb.GetResponse, pb.MultiGetResponse, pb.ScanResponse):
        parsed = message.FromString(response_bytes(3, records[:1], token=b"", query_id=query))
        assert (parsed.epoch, parsed.query_id) == (3, query)


def test_response_framing_of_every_record_length() -> None:
    encoder = RecordEncoder(
        StructType((StructField("k", AtomicType("binary")),)),
        StructType((StructField("v", AtomicType("long")),)),
    )
    # Lengths across the varint's one-, two- and three-byte forms (the framing table ends at 16 KiB).
    sizes = [*range(0, 140), *range(16_370, 16_400), 70_000, 5, 70_000]
    records = [encoder.absent((b"x" * size,)) for size in sizes]
    for _ in range(2):  # the second time from the table
        response = pb.MultiGetResponse.FromString(response_bytes(7, iter(records), query_id="q"))
        assert [r.SerializeToString() for r in response.records] == records
        assert (response.epoch, response.query_id) == (7, "q")


def test_one_record_response_is_response_bytes() -> None:
    encoder = RecordEncoder(
        StructType((StructField("k", AtomicType("long")),)),
        StructType((StructField("v", AtomicType("long")),)),
    )
    for record in (encoder.present(1, (7,), (70,)), encoder.absent((7,)), encoder.present(0, (1,), (2**40,))):
        for epoch, query, first in (
            (0, "", 0),
            (2**40, "q", 3),
            (5, "6f1c1bd4-0dd5-4be9-a1a4-7cfb5a3c7a43", 0),
        ):
            expected = response_bytes(epoch, [record], query_id=query, shape_first_epoch=first)
            assert one_record_response(epoch, record, response_tail(query, first)) == expected
