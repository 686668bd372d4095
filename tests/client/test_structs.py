"""``Struct``: every field of a struct value, in schema order, with names that may repeat."""

from __future__ import annotations

import copy
import pickle

import pytest

from epochstate.client import AmbiguousField, Struct
from epochstate.client.values import from_row, from_value, to_row
from epochstate.core.sparktypes import AtomicType, StructField, StructType
from epochstate.v1 import epochstate_pb2 as pb

BUFFER = Struct(("count", "sum", "count"), (3, 9.5, 2))


def test_positions_and_tuple_equality() -> None:
    assert (BUFFER[0], BUFFER[1], BUFFER[2], BUFFER[-1]) == (3, 9.5, 2, 2)
    assert BUFFER[1:] == (9.5, 2) and type(BUFFER[1:]) is tuple
    shorter = Struct(("count", "sum"), (3, 9.5))
    assert BUFFER == (3, 9.5, 2) and tuple.__eq__((3, 9.5, 2), BUFFER) and shorter != BUFFER
    assert hash(BUFFER) == hash((3, 9.5, 2)) and len(BUFFER) == 3
    count, total, other = BUFFER
    assert (count, total, other) == (3, 9.5, 2)
    # Like PySpark's Row: equality is by values in order, whatever the names.
    assert Struct(("a", "b"), (1, 2)) == Struct(("x", "y"), (1, 2))
    assert Struct(("a", "b"), (1, 2)).fields != Struct(("x", "y"), (1, 2)).fields


def test_names_unique_repeated_and_unknown() -> None:
    assert BUFFER.names == ("count", "sum", "count")
    assert BUFFER.fields == (("count", 3), ("sum", 9.5), ("count", 2))
    assert BUFFER["sum"] == 9.5 and BUFFER.get("sum") == 9.5
    assert BUFFER.getall("count") == (3, 2) and BUFFER.getall("sum") == (9.5,) and BUFFER.getall("x") == ()
    assert BUFFER.positions("count") == (0, 2) and BUFFER.has_repeated_names()
    with pytest.raises(AmbiguousField, match=r"'count' occurs 2 times \(positions 0, 2\)") as caught:
        BUFFER["count"]
    assert isinstance(caught.value, KeyError) and caught.value.positions == (0, 2)
    assert "getall('count')" in str(caught.value)
    with pytest.raises(AmbiguousField):
        BUFFER.get("count")
    with pytest.raises(KeyError, match="nope"):
        BUFFER["nope"]
    assert BUFFER.get("nope") is None and BUFFER.get("nope", 0) == 0
    # Attributes are not fields: `count` and `index` stay the tuple's methods.
    assert BUFFER.count(3) == 1 and BUFFER.index(2) == 2


def test_asdict_refuses_repeated_names_and_converts_nested_structs() -> None:
    with pytest.raises(AmbiguousField, match="'count'"):
        BUFFER.asdict()
    nested = Struct(("user", "state"), ("u", Struct(("n",), (1,))))
    assert nested.asdict() == {"user": "u", "state": (1,)}
    assert nested.asdict(recursive=True) == {"user": "u", "state": {"n": 1}}
    in_list = Struct(("items",), ([Struct(("a",), (1,))],))
    assert in_list.asdict(recursive=True) == {"items": [{"a": 1}]}
    with pytest.raises(AmbiguousField, match="'x'"):
        Struct(("s",), (Struct(("x", "x"), (1, 2)),)).asdict(recursive=True)


def test_immutable_printable_and_picklable() -> None:
    with pytest.raises(AttributeError, match="immutable"):
        setattr(BUFFER, "count", 1)  # noqa: B010
    with pytest.raises(TypeError):
        BUFFER[0] = 1  # type: ignore[index]
    assert repr(BUFFER) == "Struct(count=3, sum=9.5, count=2)"
    for copied in (pickle.loads(pickle.dumps(BUFFER)), copy.deepcopy(BUFFER), copy.copy(BUFFER)):
        assert type(copied) is Struct and copied.fields == BUFFER.fields
    assert Struct.from_pairs([("a", 1), ("a", 2)]).fields == (("a", 1), ("a", 2))
    with pytest.raises(ValueError, match="2 field names for 1 values"):
        Struct(("a", "b"), (1,))


def test_rows_from_the_daemon_keep_every_field() -> None:
    inner = StructType((StructField("x", AtomicType("long")), StructField("x", AtomicType("string"))))
    schema = StructType(
        (
            StructField("count", AtomicType("long")),
            StructField("sum", AtomicType("double")),
            StructField("count", AtomicType("long")),
            StructField("first", inner),
        )
    )
    row = pb.Row(
        fields=[
            pb.Value(int=3),
            pb.Value(float=9.5),
            pb.Value(int=2),
            pb.Value(struct=pb.Row(fields=[pb.Value(int=7), pb.Value(string="r")])),
        ]
    )
    value = from_row(row, schema)
    assert value.fields == (("count", 3), ("sum", 9.5), ("count", 2), ("first", (7, "r")))
    assert value["first"].names == ("x", "x")
    assert from_value(pb.Value(struct=row), schema) == value
    # A Struct read back is a valid key or value again: by position.
    assert to_row(value, schema) == row
