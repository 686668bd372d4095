"""Avro state rows through the ingest path: our Avro datum reader against
``fastavro.schemaless_reader``, both inside the same Spark framing, in one run.

    python bench/avro_decode.py [--rows 50000] [--repeat 5]

For each workload (the column families a transformWithState job keeps), rows are
written with ``fastavro.schemaless_writer`` in Spark's Avro form (every struct
field a ``[null, T]`` union) and framed as Spark frames them (version byte,
schema id, prefix-scan key halves). Then, on one thread, each implementation
decodes every (key, value) and encodes what the ingest path stores for it
(:func:`keycodec.encode_fields` and :meth:`RecordEncoder.present`), best of
``--repeat`` runs, the two implementations alternating. Both must give the same
bytes for every row, which is checked first. Rates are rows per second of wall
clock; the last column is fastavro's rate over ours (above 1: fastavro is faster).
"""

from __future__ import annotations

import argparse
import decimal
import io
import os
import random
import struct
import time
from collections.abc import Callable
from typing import Any

import fastavro

from bench.table import print_table
from epochstate.core.sparktypes import (
    ArrayType,
    AtomicType,
    DecimalType,
    MapType,
    MapValue,
    SparkType,
    StructType,
    parse_struct,
)
from epochstate.daemon.codec import keycodec
from epochstate.daemon.codec.records import RecordEncoder
from epochstate.daemon.sources.checkpoint.schemafile import NO_PREFIX, PREFIX_SCAN, ColumnFamilySchema
from epochstate.daemon.sources.errors import CorruptRow
from epochstate.daemon.sources.rows.avro import AvroStateDecoder, Datum, decimal_width

_INTS = {"byte", "short", "integer", "date"}
_LONGS = {"long", "timestamp", "timestamp_ntz"}


def avro_type(t: SparkType, names: list[int]) -> Any:
    """Spark's Avro form of ``t`` (what ``SchemaConverters.toAvroType`` writes)."""
    if isinstance(t, StructType):
        names.append(0)
        return {
            "type": "record",
            "name": f"r{len(names)}",
            "fields": [
                {
                    "name": f"f{i}",
                    "type": "null" if f.type == AtomicType("null") else ["null", avro_type(f.type, names)],
                }
                for i, f in enumerate(t.fields)
            ],
        }
    if isinstance(t, ArrayType):
        return {"type": "array", "items": element_type(t.element, names)}
    if isinstance(t, MapType):
        return {"type": "map", "values": element_type(t.value, names)}
    if isinstance(t, DecimalType):
        names.append(0)
        return {"type": "fixed", "name": f"d{len(names)}", "size": decimal_width(t.precision)}
    assert isinstance(t, AtomicType)
    simple = {
        "boolean": "boolean",
        "float": "float",
        "double": "double",
        "string": "string",
        "binary": "bytes",
    }
    return "int" if t.name in _INTS else "long" if t.name in _LONGS else simple[t.name]


def element_type(t: SparkType, names: list[int]) -> Any:
    inner = avro_type(t, names)
    return ["null", inner] if isinstance(t, (StructType, ArrayType, MapType)) else inner


def from_fastavro(t: SparkType) -> Callable[[Any], Any] | None:
    """What turns fastavro's value of ``t`` into ours (``None``: it is ours already)."""
    if isinstance(t, StructType):
        fields = [from_fastavro(f.type) for f in t.fields]
        if all(c is None for c in fields):
            return lambda d: tuple(d.values())
        return lambda d: tuple(
            v if c is None or v is None else c(v) for c, v in zip(fields, d.values(), strict=True)
        )
    if isinstance(t, ArrayType):
        item = from_fastavro(t.element)
        return None if item is None else lambda xs: [None if x is None else item(x) for x in xs]
    if isinstance(t, MapType):
        value = from_fastavro(t.value)
        if value is None:
            return lambda d: MapValue(tuple(d.items()))
        return lambda d: MapValue(tuple((k, None if v is None else value(v)) for k, v in d.items()))
    if isinstance(t, DecimalType):
        context, exponent = decimal.Context(prec=80), -t.scale
        return lambda raw: decimal.Decimal(int.from_bytes(raw, "big", signed=True)).scaleb(exponent, context)
    return None


def fastavro_datum(schema: StructType) -> Datum:
    """:func:`avro.read_datum`'s contract over ``fastavro.schemaless_reader``."""
    parsed = fastavro.parse_schema(avro_type(schema, []))
    convert = from_fastavro(schema)
    assert convert is not None
    read, bytes_io = fastavro.schemaless_reader, io.BytesIO

    def decode(buf: bytes, pos: int) -> tuple[Any, ...]:
        stream = bytes_io(buf)
        stream.seek(pos)
        try:
            value = read(stream, parsed)
        except (EOFError, ValueError, IndexError, UnicodeDecodeError) as err:
            raise CorruptRow(f"Avro datum does not fit: {err}") from err
        if stream.tell() != len(buf):
            raise CorruptRow(f"{len(buf) - stream.tell()} bytes after the Avro datum")
        result: tuple[Any, ...] = convert(value)
        return result

    return decode


def spark_value(t: SparkType, rng: random.Random) -> Any:
    if isinstance(t, StructType):
        return {
            f"f{i}": None if rng.random() < 0.05 else spark_value(f.type, rng) for i, f in enumerate(t.fields)
        }
    if isinstance(t, ArrayType):
        return [spark_value(t.element, rng) for _ in range(rng.randrange(5))]
    if isinstance(t, MapType):
        return {f"k{i}": spark_value(t.value, rng) for i in range(rng.randrange(4))}
    if isinstance(t, DecimalType):
        return rng.randrange(-(10**9), 10**9).to_bytes(decimal_width(t.precision), "big", signed=True)
    assert isinstance(t, AtomicType)
    if t.name == "string":
        return f"user-{rng.randrange(10**8):08d}"
    if t.name == "binary":
        return rng.randbytes(rng.randrange(40))
    if t.name in ("float", "double"):
        return rng.random() * 1000
    if t.name == "boolean":
        return rng.random() < 0.5
    return rng.randrange(-(2**31), 2**31)


def datum(schema: StructType, rng: random.Random) -> bytes:
    out = io.BytesIO()
    fastavro.schemaless_writer(out, fastavro.parse_schema(avro_type(schema, [])), spark_value(schema, rng))
    return out.getvalue()


def framed_rows(family: ColumnFamilySchema, rows: int, seed: int) -> list[tuple[bytes, bytes]]:
    rng = random.Random(seed)
    key_fields = family.key_schema.fields
    n = family.num_cols_prefix_key if family.encoder == PREFIX_SCAN else 0
    key_id = struct.pack("<h", family.key_schema_id)
    value_head = b"\0" + struct.pack("<h", family.value_schema_id)
    out = []
    for _ in range(rows):
        rest = b"\0" + key_id + datum(StructType(key_fields[n:]), rng)
        if n:
            prefix = b"\0" + datum(StructType(key_fields[:n]), rng)
            rest = struct.pack("<i", len(prefix)) + prefix + rest
        out.append((rest, value_head + datum(family.value_schema, rng)))
    return out


def struct_of(**fields: str | dict[str, Any]) -> StructType:
    return parse_struct(
        {"type": "struct", "fields": [{"name": k, "type": v, "nullable": True} for k, v in fields.items()]}
    )


USER = struct_of(user="string")
GROUPING = {"type": "struct", "fields": [{"name": "user", "type": "string", "nullable": True}]}
# The state variables of the job tests/e2e/test_operators_tws.py checks against
# Spark (value, list element, map), then a wider value state.
WORKLOADS = {
    "value state: user -> (n long)": ColumnFamilySchema("count", USER, struct_of(n="long"), NO_PREFIX),
    "list element: user -> (v long, tag string)": ColumnFamilySchema(
        "events", USER, struct_of(v="long", tag="string"), NO_PREFIX
    ),
    "map state: (user), (tag) -> (n long, last double)": ColumnFamilySchema(
        "tags",
        struct_of(key=GROUPING, userKey={"type": "struct", "fields": [{"name": "tag", "type": "string"}]}),
        struct_of(n="long", last="double"),
        PREFIX_SCAN,
        1,
    ),
    "value state: user -> 4 fields": ColumnFamilySchema(
        "value", USER, struct_of(count="long", total="double", last="string", ok="boolean"), NO_PREFIX
    ),
    "value state: user -> (qty int, price decimal(12,2))": ColumnFamilySchema(
        "price", USER, struct_of(qty="integer", price="decimal(12,2)"), NO_PREFIX
    ),
    "value state: user -> 12 fields, nested, array, map": ColumnFamilySchema(
        "wide",
        USER,
        struct_of(
            a="long",
            b="long",
            c="integer",
            d="double",
            e="string",
            f="string",
            g="boolean",
            h="timestamp",
            i="date",
            j={"type": "struct", "fields": [{"name": "x", "type": "long"}, {"name": "y", "type": "string"}]},
            k={"type": "array", "elementType": "long", "containsNull": False},
            m={"type": "map", "keyType": "string", "valueType": "double", "valueContainsNull": True},
        ),
        NO_PREFIX,
    ),
}


Rows = list[tuple[bytes, bytes]]


def decode(decoder: AvroStateDecoder, rows: Rows, encoder: RecordEncoder) -> list[Any]:
    """Decoding alone: every key and value."""
    key, value = decoder.key, decoder.value
    return [(key(k), value(v)) for k, v in rows]


def ingest(decoder: AvroStateDecoder, rows: Rows, encoder: RecordEncoder) -> list[Any]:
    """What the ingest path does with a row: decode, then the store key and the Record."""
    key, value, present, encode = decoder.key, decoder.value, encoder.present, keycodec.encode_fields
    out = []
    for raw_key, raw_value in rows:
        k = key(raw_key)
        out.append((encode(k), present(0, k, value(raw_value))))
    return out


Run = Callable[[AvroStateDecoder, Rows, RecordEncoder], object]


def best(
    run: Run, decoders: list[AvroStateDecoder], rows: Rows, encoder: RecordEncoder, repeat: int
) -> list[float]:
    """The best seconds of each decoder; runs alternate, so load hits both alike."""
    times: list[list[float]] = [[] for _ in decoders]
    for _ in range(repeat):
        for decoder, samples in zip(decoders, times, strict=True):
            started = time.perf_counter()
            run(decoder, rows, encoder)
            samples.append(time.perf_counter() - started)
    return [min(samples) for samples in times]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rows", type=int, default=50_000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args(argv)
    table = []
    for seed, (name, family) in enumerate(WORKLOADS.items()):
        rows = framed_rows(family, args.rows, seed)
        encoder = RecordEncoder(family.key_schema, family.value_schema)
        decoders = [AvroStateDecoder(family), AvroStateDecoder(family, fastavro_datum)]
        assert ingest(decoders[0], rows, encoder) == ingest(decoders[1], rows, encoder), name
        mean = sum(len(k) + len(v) for k, v in rows) / len(rows)
        for what, run in (("decode", decode), ("decode + store key + Record", ingest)):
            own, fast = best(run, decoders, rows, encoder, args.repeat)
            rates = (f"{args.rows / own:,.0f}", f"{args.rows / fast:,.0f}", f"{own / fast:.2f}")
            table.append((name, f"{mean:.0f}", what, *rates))
    load = " ".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"{args.rows:,} rows per workload, best of {args.repeat}; one thread; load average {load}")
    header = ("workload", "bytes/row", "path", "ours rows/s", "fastavro rows/s", "fastavro / ours")
    print_table(header, table)


if __name__ == "__main__":
    main()
