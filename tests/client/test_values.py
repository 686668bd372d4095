"""Keys filled in place into a request (``to_rows``) are the Rows ``to_row`` makes."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from typing import Any

import pytest

from epochstate.client.values import to_row, to_rows
from epochstate.core.sparktypes import parse_struct
from epochstate.v1 import epochstate_pb2 as pb

KEY = parse_struct(
    {
        "type": "struct",
        "fields": [
            {"name": n, "type": t, "nullable": True, "metadata": {}}
            for n, t in (
                ("user", "long"),
                ("name", "string"),
                ("day", "date"),
                ("amount", "decimal(10,2)"),
                ("inner", {"type": "struct", "fields": [{"name": "x", "type": "long", "nullable": True}]}),
            )
        ],
    }
)

KEYS: list[Any] = [
    [1, "a", dt.date(2024, 1, 2), Decimal("1.50"), (3,)],
    (2, "b", "2024-01-03", 7, {"x": 4}),
    [3],
    (4, None, None, None, None),
    [True, b"raw", 1.5],
    {"user": 5, "name": "n"},
    6,
    [1, "a", None, None, None, "one too many"],
    [],
    (dt.datetime(2024, 1, 1, 12), "t"),
]


def test_to_rows_fills_each_key_as_to_row_makes_it() -> None:
    request = pb.MultiGetRequest()
    to_rows(KEYS, KEY, request.keys)
    assert list(request.keys) == [to_row(k, KEY) for k in KEYS]
    assert [r.SerializeToString() for r in request.keys] == [to_row(k, KEY).SerializeToString() for k in KEYS]


def test_to_rows_refuses_as_to_row() -> None:
    with pytest.raises(ValueError, match="unknown field"):
        to_row({"nobody": 1}, KEY)
    with pytest.raises(ValueError, match="unknown field"):
        to_rows([[1], {"nobody": 1}], KEY, pb.MultiGetRequest().keys)
