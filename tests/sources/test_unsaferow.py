"""UnsafeRow decoding of edge cases, on rows built byte by byte (the layout itself
is proven against Spark in test_oracle)."""

from __future__ import annotations

import struct
from decimal import Decimal
from typing import Any

import pytest

from epochstate.core.sparktypes import MapValue, StructType, parse_struct
from epochstate.daemon.sources.errors import CorruptRow, CorruptStateFile
from epochstate.daemon.sources.rows.unsaferow import RowDecoder

Slot = bytes | tuple[str, bytes] | None  # fixed 8 bytes, ("var", payload), or null


def _pad(data: bytes) -> bytes:
    return data + bytes(-len(data) % 8)


def var(payload: bytes) -> tuple[str, bytes]:
    return ("var", payload)


def fixed(fmt: str, value: Any) -> bytes:
    packed = struct.pack("<" + fmt, value)
    return packed + bytes(8 - len(packed))


def _layout(slots: list[Slot], header: bytes, width: int) -> bytes:
    """Header, then the slots, then the variable payloads; offsets from the start."""
    nulls = 0
    body = b""
    tail = b""
    start = len(header) + 8 * ((len(slots) + 63) // 64) + _pad_len(width * len(slots))
    for i, slot in enumerate(slots):
        if slot is None:
            nulls |= 1 << i
            body += bytes(width)
        elif isinstance(slot, tuple):
            body += struct.pack("<Q", (start + len(tail)) << 32 | len(slot[1]))
            tail += _pad(slot[1])
        else:
            body += slot[:width]
    bitset = nulls.to_bytes(8 * ((len(slots) + 63) // 64), "little")
    return header + bitset + _pad(body) + tail


def _pad_len(n: int) -> int:
    return n + (-n % 8)


def row(*slots: Slot) -> bytes:
    return _layout(list(slots), b"", 8)


def array(*elements: Slot, width: int = 8) -> bytes:
    return _layout(list(elements), struct.pack("<q", len(elements)), width)


def unsafe_map(keys: bytes, values: bytes) -> bytes:
    return struct.pack("<q", len(keys)) + keys + values


def schema(simple: str) -> StructType:
    """``a:long,b:string`` -> a struct schema, types in Spark's JSON names."""
    fields = []
    for part in simple.split(";"):
        name, type_json = part.split("=", 1)
        fields.append({"name": name, "type": _json(type_json), "nullable": True})
    return parse_struct({"type": "struct", "fields": fields})


def _json(text: str) -> Any:
    import json

    return json.loads(text) if text.startswith("{") else text


def test_every_type_null() -> None:
    names = [
        "boolean",
        "byte",
        "short",
        "integer",
        "long",
        "float",
        "double",
        "decimal(10,2)",
        "decimal(30,5)",
        "string",
        "binary",
        "date",
        "timestamp",
        "timestamp_ntz",
        "void",
        '{"type":"array","elementType":"long","containsNull":true}',
        '{"type":"map","keyType":"string","valueType":"long","valueContainsNull":true}',
        '{"type":"struct","fields":[{"name":"x","type":"long","nullable":true}]}',
    ]
    decoder = RowDecoder(schema(";".join(f"f{i}={n}" for i, n in enumerate(names))))
    assert decoder.decode(row(*[None] * len(names))) == (None,) * len(names)


def test_fixed_width_extremes() -> None:
    decoder = RowDecoder(
        schema(
            "a=boolean;b=boolean;c=byte;d=short;e=integer;f=long;g=float;h=double;"
            "i=date;j=timestamp;k=timestamp_ntz"
        )
    )
    buf = row(
        fixed("?", True),
        fixed("?", False),
        fixed("b", -128),
        fixed("h", -32768),
        fixed("i", -(2**31)),
        fixed("q", -(2**63)),
        fixed("f", -0.0),
        fixed("d", 1e308),
        fixed("i", -719162),
        fixed("q", -1),
        fixed("q", 2**62),
    )
    values = decoder.decode(buf)
    expected = (True, False, -128, -32768, -(2**31), -(2**63), -0.0, 1e308, -719162, -1, 2**62)
    assert values == expected
    assert isinstance(values[0], bool) and str(values[6]) == "-0.0"


def test_empty_and_multibyte_strings_and_binary() -> None:
    decoder = RowDecoder(schema("a=string;b=binary;c=string;d=string"))
    text = "ü€\U0001f600"
    buf = row(var(b""), var(b""), var(text.encode()), var(b"ok\xff"))
    # Invalid UTF-8 is replaced the way the JVM decodes it, never an error.
    assert decoder.decode(buf) == ("", b"", text, "ok\ufffd")


def test_negative_and_scaled_decimals() -> None:
    decoder = RowDecoder(
        schema("a=decimal(10,2);b=decimal(30,5);c=decimal(18,0);d=decimal(38,10);e=decimal(10,2)")
    )
    big = -(10**25) - 1
    buf = row(
        fixed("q", -12345),
        var(big.to_bytes(11, "big", signed=True)),
        fixed("q", -(10**18) + 1),
        var((10**37).to_bytes(16, "big", signed=True)),
        fixed("q", 0),
    )
    a, b, c, d, e = decoder.decode(buf)
    assert a == Decimal("-123.45") and a.as_tuple().exponent == -2
    assert b == Decimal("-100000000000000000000.00001")
    assert c == Decimal(-(10**18) + 1)
    assert d == Decimal("1000000000000000000000000000.0000000000")
    assert d.as_tuple().exponent == -10
    assert e.as_tuple() == Decimal("0.00").as_tuple()


def test_nested_null_arrays_structs_and_maps() -> None:
    decoder = RowDecoder(
        schema(
            'aa={"type":"array","elementType":{"type":"array","elementType":"long",'
            '"containsNull":true},"containsNull":true};'
            'st={"type":"struct","fields":[{"name":"x","type":"integer","nullable":true},'
            '{"name":"y","type":{"type":"array","elementType":"string","containsNull":true},'
            '"nullable":true}]};'
            'm={"type":"map","keyType":"string","valueType":{"type":"array",'
            '"elementType":"integer","containsNull":true},"valueContainsNull":true};'
            'e={"type":"array","elementType":"string","containsNull":true}'
        )
    )
    inner = array(fixed("q", 1), None)
    aa = array(None, var(array()), var(inner))
    st = row(None, var(array(var(b"s"), None, var(b""))))
    m = unsafe_map(array(var(b"k1"), var(b"k2")), array(None, var(array(fixed("i", 7), width=4))))
    buf = row(var(aa), var(st), var(m), var(array()))
    assert decoder.decode(buf) == (
        [None, [], [1, None]],
        (None, ["s", None, ""]),
        MapValue((("k1", None), ("k2", [7]))),
        [],
    )


def test_primitive_array_element_widths() -> None:
    kinds: dict[str, tuple[str, int, list[Any]]] = {
        "boolean": ("?", 1, [True, False]),
        "byte": ("b", 1, [-1, 127]),
        "short": ("h", 2, [-2, 300]),
        "integer": ("i", 4, [-3, 70000]),
        "date": ("i", 4, [-4, 19000]),
        "float": ("f", 4, [0.5, -1.5]),
        "long": ("q", 8, [-5, 2**40]),
        "double": ("d", 8, [0.25, -2.5]),
        "timestamp": ("q", 8, [-6, 2**50]),
    }
    parts = [f'{name}={{"type":"array","elementType":"{name}","containsNull":true}}' for name in kinds]
    parts.append('dec={"type":"array","elementType":"decimal(5,2)","containsNull":true}')
    decoder = RowDecoder(schema(";".join(parts)))
    slots: list[Slot] = []
    expected: list[Any] = []
    for fmt, width, values in kinds.values():
        elements = [struct.pack("<" + fmt, v) for v in values]
        slots.append(var(array(elements[0], None, elements[1], width=width)))
        expected.append([values[0], None, values[1]])
    slots.append(var(array(fixed("q", -101), None)))
    expected.append([Decimal("-1.01"), None])
    assert decoder.decode(row(*slots)) == tuple(expected)


def test_more_than_64_fields_use_two_bitset_words() -> None:
    decoder = RowDecoder(schema(";".join(f"f{i}=long" for i in range(70))))
    slots: list[Slot] = [fixed("q", i) for i in range(70)]
    slots[0] = slots[64] = slots[69] = None
    expected: list[Any] = list(range(70))
    expected[0] = expected[64] = expected[69] = None
    assert decoder.decode(row(*slots)) == tuple(expected)
    assert decoder.decode(memoryview(row(*slots))) == tuple(expected)


def test_empty_struct() -> None:
    assert RowDecoder(StructType(())).decode(b"") == ()


@pytest.mark.parametrize(
    ("spec", "buf"),
    [
        ("a=long;b=long", row(fixed("q", 1), fixed("q", 2))[:-1]),
        ("a=string", bytes(8) + struct.pack("<Q", (16 << 32) | 5) + b"abc"),
        ("a=binary", bytes(8) + struct.pack("<Q", (2**31 << 32) | 1)),
        (
            'a={"type":"array","elementType":"long","containsNull":true}',
            row(var(struct.pack("<q", 1000))),
        ),
        (
            'a={"type":"array","elementType":"long","containsNull":true}',
            row(var(struct.pack("<q", -1))),
        ),
        (
            'a={"type":"map","keyType":"long","valueType":"long","valueContainsNull":true}',
            row(var(unsafe_map(array(fixed("q", 1)), array()))),
        ),
        (
            'a={"type":"struct","fields":[{"name":"x","type":"long","nullable":true}]}',
            row(var(b"\0" * 8)),
        ),
        ("a=long", (1 << 5).to_bytes(8, "little") + fixed("q", 1)),
    ],
)
def test_bytes_that_do_not_fit_the_schema_are_corrupt(spec: str, buf: bytes) -> None:
    with pytest.raises(CorruptRow) as info:
        RowDecoder(schema(spec)).decode(buf)
    assert isinstance(info.value, CorruptStateFile)
