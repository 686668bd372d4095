import random
from decimal import Decimal
from typing import Any

import pytest

from epochstate.core.sparktypes import MapValue
from epochstate.daemon.codec import keycodec

SAMPLES: list[object] = [
    None,
    True,
    False,
    0,
    -1,
    2**63 - 1,
    -(2**63),
    1.5,
    -0.0,
    float("-inf"),
    Decimal("-12.30"),
    Decimal("123456789012345678901234.56789"),
    "",
    "a\x00b",
    "ünïcode",
    b"",
    b"\x00\xff\x00",
    (1, "x", None),
    [1, None, [2, 3]],
    MapValue((("k", 1), ("l", None))),
    ((), [], MapValue(())),
]


@pytest.mark.parametrize("value", SAMPLES, ids=repr)
def test_round_trip(value: object) -> None:
    assert keycodec.decode(keycodec.encode(value)) == value


def test_fields_round_trip_and_prefix() -> None:
    key = (7, "abc", (1.0, None))
    encoded = keycodec.encode_fields(key)
    assert keycodec.decode_fields(encoded, 3) == key
    assert encoded.startswith(keycodec.encode_fields(key[:2]))


@pytest.mark.parametrize(
    "values",
    [
        [None, -(2**63), -5, 0, 3, 2**63 - 1],
        [None, float("-inf"), -2.5, -0.0, 0.0, 1e-300, 7.0, float("inf")],
        [None, "", "a", "a\x00", "ab", "b"],
        [None, b"", b"\x00", b"\x00\x00", b"\x01"],
        [Decimal("-100.00"), Decimal("-9.99"), Decimal("0.00"), Decimal("0.01"), Decimal("100.00")],
        [(1, "a"), (1, "b"), (2, None), (2, "")],
    ],
)
def test_order_preserved(values: list[object]) -> None:
    shuffled = values[:]
    random.Random(1).shuffle(shuffled)
    assert sorted(shuffled, key=keycodec.encode) == values


@pytest.mark.parametrize("bad", [b"", b"\x10\x00", b"\x30abc", b"\x99", b"\x01\x01"])
def test_rejects_garbage(bad: bytes) -> None:
    with pytest.raises(keycodec.KeyCodecError):
        keycodec.decode(bad)


def test_rejects_out_of_range_int() -> None:
    with pytest.raises(keycodec.KeyCodecError):
        keycodec.encode(2**64)


@pytest.mark.parametrize(
    ("encode_one", "values"),
    [
        (keycodec.encode_int, [0, -1, 1, 2**63 - 1, -(2**63), 19_000]),
        (keycodec.encode_str, ["", "a\x00b", "ünïcode"]),
        (keycodec.encode_bytes, [b"", b"\x00\xff\x00", b"abc"]),
        (keycodec.encode_bool, [True, False]),
    ],
)
def test_typed_encoders_match_encode(encode_one: Any, values: list[Any]) -> None:
    for value in values:
        assert encode_one(value) == keycodec.encode(value)
