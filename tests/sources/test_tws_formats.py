"""The transformWithState formats byte by byte: schema file v3, list values, merge
records, and rows in the Avro state encoding (the oracle test covers them against
Spark in tests/e2e/test_operators_tws.py)."""

from __future__ import annotations

import json
import struct
from collections.abc import Callable
from decimal import Decimal
from typing import Any

import pytest

from epochstate.core.sparktypes import MapValue, StructType, parse_struct, type_to_json
from epochstate.daemon.sources.checkpoint.schemafile import (
    NO_PREFIX,
    PREFIX_SCAN,
    ColumnFamilySchema,
    parse_column_family_schemas,
)
from epochstate.daemon.sources.errors import (
    CorruptCheckpointFile,
    CorruptRow,
    UnsupportedCheckpoint,
)
from epochstate.daemon.sources.rocksdb.changelog import MERGE, PUT, ChangelogRecord, iter_changelog_ops
from epochstate.daemon.sources.rocksdb.store_files import apply_record
from epochstate.daemon.sources.rows.avro import AvroStateDecoder
from epochstate.daemon.sources.tws.reader import split_list

GROUPING = parse_struct({"type": "struct", "fields": [{"name": "user", "type": "string", "nullable": True}]})
MAP_KEY = parse_struct(
    {
        "type": "struct",
        "fields": [
            {"name": "key", "type": type_to_json(GROUPING), "nullable": True},
            {"name": "userKey", "type": {"type": "struct", "fields": [{"name": "n", "type": "integer"}]}},
        ],
    }
)
VALUE = parse_struct(
    {
        "type": "struct",
        "fields": [
            {"name": "n", "type": "long", "nullable": False},
            {"name": "last", "type": "double", "nullable": True},
            {"name": "ok", "type": "boolean", "nullable": True},
        ],
    }
)


def utf(text: str) -> bytes:
    raw = text.encode()
    return struct.pack(">H", len(raw)) + raw


def chunked(text: str) -> bytes:
    return struct.pack(">i", 1) + utf(text)


def schema_file(*families: tuple[str, object, object, dict[str, object], object]) -> bytes:
    out = utf("v3") + struct.pack(">i", len(families))
    for name, key, value, spec, user_key in families:
        out += utf(name) + struct.pack(">h", 0) + chunked(json.dumps(type_to_json(key)))  # type: ignore[arg-type]
        out += struct.pack(">h", 1) + chunked(json.dumps(type_to_json(value)))  # type: ignore[arg-type]
        out += chunked(json.dumps(spec))
        out += chunked(json.dumps(type_to_json(user_key)) if user_key else "{    }")  # type: ignore[arg-type]
    return out


def test_schema_file_v3_lists_column_families() -> None:
    data = schema_file(
        ("count", GROUPING, VALUE, {"keyStateEncoderType": NO_PREFIX}, None),
        ("tags", MAP_KEY, VALUE, {"keyStateEncoderType": PREFIX_SCAN, "numColsPrefixKey": 1}, MAP_KEY),
    )
    count, tags = parse_column_family_schemas(data)
    assert (count.name, count.encoder, count.user_key_schema) == ("count", NO_PREFIX, None)
    assert (tags.key_schema, tags.value_schema, tags.num_cols_prefix_key) == (MAP_KEY, VALUE, 1)
    assert (tags.key_schema_id, tags.value_schema_id, tags.user_key_schema) == (0, 1, MAP_KEY)
    with pytest.raises(CorruptCheckpointFile, match="trailing"):
        parse_column_family_schemas(data + b"\0")
    with pytest.raises(CorruptCheckpointFile, match="truncated"):
        parse_column_family_schemas(data[:-3])
    other = schema_file(("x", GROUPING, VALUE, {"keyStateEncoderType": "Mystery"}, None))
    with pytest.raises(UnsupportedCheckpoint, match="Mystery"):
        parse_column_family_schemas(other)
    with pytest.raises(UnsupportedCheckpoint, match="expected v3"):
        parse_column_family_schemas(utf("v2") + data[4:])


def test_list_values_split_and_merge_like_rocksdb() -> None:
    elements = [b"\0first", b"", b"\0,,,"]
    joined = b",".join(struct.pack("<i", len(e)) + e for e in elements)
    assert split_list(joined) == elements
    with pytest.raises(CorruptRow, match="no delimiter"):
        split_list(joined.replace(b"\x00\x00\x00\x00,", b"\x00\x00\x00\x00;"))
    with pytest.raises(CorruptRow, match="cut off"):
        split_list(joined + b",")
    content = utf("v2")
    for kind, key, value in ((1, b"k", b"a"), (0x11, b"k", b"b"), (0x11, b"m", b"c")):
        content += bytes([kind]) + struct.pack(">i", len(key)) + key + struct.pack(">i", len(value)) + value
    header, records = iter_changelog_ops(content + b"\0")
    records_list = list(records)
    assert header.typed and records_list[1] == ChangelogRecord(MERGE, b"k", b"b")
    assert records_list[0].op == PUT
    state: dict[bytes, bytes] = {}
    for record in records_list:
        apply_record(state, record)
    assert state == {b"k": b"a,b", b"m": b"c"}
    # Merge operator version 2 (Spark 4.1+ default): elements joined with nothing.
    concatenated = b"".join(struct.pack("<i", len(e)) + e for e in elements)
    assert split_list(concatenated, b"") == elements
    with pytest.raises(CorruptRow, match="element of"):
        split_list(joined, b"")
    state = {}
    for record in records_list:
        apply_record(state, record, b"")
    assert state == {b"k": b"ab", b"m": b"c"}


def zigzag(n: int) -> bytes:
    n = (n << 1) ^ (n >> 63)
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    return bytes(out + bytes([n]))


def avro_string(text: str) -> bytes:
    return zigzag(len(text.encode())) + text.encode()


def test_avro_rows_decode_like_unsaferow() -> None:
    family = ColumnFamilySchema("tags", MAP_KEY, VALUE, PREFIX_SCAN, 1, (), None, 0, 3)
    decoder = AvroStateDecoder(family)
    # Every field is a [null, T] union: branch 1 holds a value, branch 0 is null.
    prefix = b"\0" + zigzag(1) + zigzag(1) + avro_string("ü")
    rest = b"\0" + struct.pack("<h", 0) + zigzag(1) + zigzag(1) + zigzag(-7)
    key = struct.pack("<i", len(prefix)) + prefix + rest
    assert decoder.key(key) == (("ü",), (-7,))
    value = b"\0" + struct.pack("<h", 3) + zigzag(1) + zigzag(-(2**40)) + zigzag(0) + zigzag(1) + b"\1"
    assert decoder.value(value) == (-(2**40), None, True)
    with pytest.raises(CorruptRow, match="after the Avro datum"):
        decoder.value(value + b"\0")
    with pytest.raises(CorruptRow, match="cut off"):
        decoder.value(value[:-1])
    older = b"\0" + struct.pack("<h", 2) + value[3:]
    with pytest.raises(UnsupportedCheckpoint, match="schema id 2"):
        decoder.value(older)


def test_avro_rows_decode_arrays_maps_and_decimals() -> None:
    value_schema = parse_struct(
        {
            "type": "struct",
            "fields": [
                {"name": "xs", "type": {"type": "array", "elementType": "long", "containsNull": True}},
                {
                    "name": "m",
                    "type": {
                        "type": "map",
                        "keyType": "string",
                        "valueType": {"type": "struct", "fields": [{"name": "z", "type": "double"}]},
                        "valueContainsNull": True,
                    },
                },
                {"name": "d", "type": "decimal(10,2)"},
            ],
        }
    )
    decoder = AvroStateDecoder(ColumnFamilySchema("v", GROUPING, value_schema, NO_PREFIX))
    # Arrays and maps come in blocks (a negative count is followed by the block's
    # byte size; 0 ends them); a struct element is a [null, T] union, a long is not;
    # decimal(10, 2) is a 5-byte big-endian fixed.
    xs = zigzag(1) + zigzag(2) + zigzag(1) + zigzag(-2) + zigzag(-1) + zigzag(1) + zigzag(3) + zigzag(0)
    m = zigzag(1) + zigzag(2) + avro_string("q") + zigzag(1) + zigzag(1) + struct.pack("<d", 2.5)
    m += avro_string("r") + zigzag(0) + zigzag(0)
    d = zigzag(1) + (-1234).to_bytes(5, "big", signed=True)
    row = b"\0" + struct.pack("<h", 0) + xs + m + d
    assert decoder.value(row) == ([1, -2, 3], MapValue((("q", (2.5,)), ("r", None))), Decimal("-12.34"))
    with pytest.raises(CorruptRow):
        decoder.value(row[:-2])
    keyed = parse_struct(
        {
            "type": "struct",
            "fields": [{"name": "m", "type": {"type": "map", "keyType": "integer", "valueType": "long"}}],
        }
    )
    with pytest.raises(UnsupportedCheckpoint, match="string map keys"):
        AvroStateDecoder(ColumnFamilySchema("m", GROUPING, keyed, NO_PREFIX))


def test_avro_framing_is_read_around_any_datum_reader() -> None:
    family = ColumnFamilySchema("tags", MAP_KEY, VALUE, PREFIX_SCAN, 1, (), None, 0, 3)
    seen: list[tuple[str, bytes]] = []

    def datum(schema: StructType) -> Callable[[bytes, int], tuple[Any, ...]]:
        def read(buf: bytes, pos: int) -> tuple[Any, ...]:
            seen.append((schema.fields[0].name, buf[pos:]))
            return (len(seen),)

        return read

    decoder = AvroStateDecoder(family, datum)
    prefix = b"\0" + b"PREFIX"
    key = struct.pack("<i", len(prefix)) + prefix + b"\0" + struct.pack("<h", 0) + b"REST"
    assert decoder.key(key) == (1, 2)
    assert decoder.value(b"\0" + struct.pack("<h", 3) + b"VALUE") == (3,)
    assert seen == [("key", b"PREFIX"), ("userKey", b"REST"), ("n", b"VALUE")]
    with pytest.raises(UnsupportedCheckpoint, match="schema id 1"):
        decoder.value(b"\0" + struct.pack("<h", 1) + b"VALUE")
