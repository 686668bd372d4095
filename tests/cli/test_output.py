"""The JSON mapping of values and the folding of messages (pure functions)."""

from __future__ import annotations

import datetime as dt
import json
from decimal import Decimal

from epochstate.cli.output import compact, jsonable, one_line
from epochstate.client import Struct


def test_values_map_to_json_without_loss_or_invalid_documents() -> None:
    value = {
        "b": b"\x00\xff",
        "d": Decimal("12345678901234567890.000000001"),
        "day": dt.date(2024, 2, 29),
        "at": dt.datetime(2024, 2, 29, 12, 30, 0, 5),
        "nan": float("nan"),
        "inf": float("-inf"),
        "map": {1: "x", dt.date(2024, 1, 1): "y"},
        "pairs": [([1], "x")],
    }
    assert jsonable(value) == {
        "b": "AP8=",
        "d": "12345678901234567890.000000001",
        "day": "2024-02-29",
        "at": "2024-02-29T12:30:00.000005Z",
        "nan": "NaN",
        "inf": "-Infinity",
        "map": {"1": "x", "2024-01-01": "y"},
        "pairs": [[[1], "x"]],
    }
    line = compact(value)
    assert "\n" not in line and json.loads(line) == jsonable(value)


def test_messages_fold_to_one_line() -> None:
    assert one_line("INVALID_ARGUMENT: bad key\n  caused by: field 0\n\n") == (
        "INVALID_ARGUMENT: bad key caused by: field 0"
    )


def test_structs_keep_every_field_in_schema_order() -> None:
    unique = Struct(("user", "count"), ("alice", 3))
    repeated = Struct(("count", "sum", "count"), (3, 9.5, Struct(("x", "x"), (b"\x01", None))))
    # Unique names: an object (in schema order); a repeated name: [name, value] pairs.
    assert json.loads(compact(unique)) == {"user": "alice", "count": 3}
    assert list(json.loads(compact(unique))) == ["user", "count"]
    assert jsonable(repeated) == [["count", 3], ["sum", 9.5], ["count", [["x", "AQ=="], ["x", None]]]]
    assert jsonable([repeated, {"k": unique}]) == [jsonable(repeated), {"k": {"user": "alice", "count": 3}}]
