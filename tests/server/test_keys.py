"""Request keys to store keys: the one-pass encoder against the full validation path."""

import re
from typing import Any

import pytest

from epochstate.core.sparktypes import parse_struct
from epochstate.daemon.codec import keycodec
from epochstate.daemon.server.values import BadKey, KeyEncoder, key_from_proto
from epochstate.v1 import epochstate_pb2 as pb


def schema(*fields: tuple[str, Any]) -> Any:
    return parse_struct(
        {
            "type": "struct",
            "fields": [{"name": n, "type": t, "nullable": True, "metadata": {}} for n, t in fields],
        }
    )


def row(*values: pb.Value) -> pb.Row:
    return pb.Row(fields=list(values))


ONE_LONG = schema(("user", "long"))
MIXED = schema(("id", "integer"), ("name", "string"), ("day", "date"), ("at", "timestamp"), ("ok", "boolean"))

CASES = [
    # natural kinds: the one-pass path
    (ONE_LONG, row(pb.Value(int=42))),
    (ONE_LONG, row(pb.Value(int=0))),
    (ONE_LONG, row(pb.Value(int=-(2**63)))),
    (schema(("id", "integer")), row(pb.Value(int=-(2**31)))),
    (schema(("id", "byte")), row(pb.Value(int=127))),
    (
        MIXED,
        row(
            pb.Value(int=7),
            pb.Value(string="ä\x00"),
            pb.Value(date=19000),
            pb.Value(timestamp_micros=-5),
            pb.Value(bool=True),
        ),
    ),
    # other kinds the full path coerces: null, date and timestamp as text
    (ONE_LONG, row(pb.Value(null=True))),
    (
        MIXED,
        row(
            pb.Value(int=7),
            pb.Value(null=True),
            pb.Value(string="2022-01-02"),
            pb.Value(string="2022-01-02T03:04:05Z"),
            pb.Value(bool=False),
        ),
    ),
    (schema(("x", "double"), ("b", "binary")), row(pb.Value(int=3), pb.Value(binary=b"\x00"))),
    (schema(("d", "decimal(10,2)")), row(pb.Value(decimal="1.5"))),
    (
        schema(
            (
                "s",
                {
                    "type": "struct",
                    "fields": [{"name": "a", "type": "long", "nullable": True, "metadata": {}}],
                },
            )
        ),
        row(pb.Value(struct=row(pb.Value(int=1)))),
    ),
]


def test_encode_all_matches_the_full_path() -> None:
    for key_schema, key in CASES:
        expected = keycodec.encode_fields(key_from_proto(key, key_schema))
        assert KeyEncoder(key_schema).encode_all([key, key]) == [expected, expected], key
        assert KeyEncoder(key_schema).canonical(key) == key_from_proto(key, key_schema)


@pytest.mark.parametrize(
    ("key_schema", "key", "message"),
    [
        (ONE_LONG, row(pb.Value(string="x")), "key field 'user': expected bigint, got string 'x'"),
        # Other kinds whose value reads as the int 0.
        (ONE_LONG, row(pb.Value(bool=False)), "key field 'user': expected bigint, got bool False"),
        (ONE_LONG, row(pb.Value()), "key field 'user': expected bigint, got an empty Value"),
        (ONE_LONG, row(), "the key has 1 field(s) (user); got 0"),
        (ONE_LONG, row(pb.Value(int=1), pb.Value(int=2)), "the key has 1 field(s) (user); got 2"),
        (schema(("id", "integer")), row(pb.Value(int=2**31)), "2147483648 is out of range for integer"),
        (
            MIXED,
            row(
                pb.Value(int=1),
                pb.Value(int=2),
                pb.Value(date=1),
                pb.Value(timestamp_micros=1),
                pb.Value(bool=True),
            ),
            "key field 'name': expected string, got int 2",
        ),
    ],
)
def test_bad_keys_fail_like_the_full_path(key_schema: Any, key: pb.Row, message: str) -> None:
    good = row(*[pb.Value(null=True)] * len(key_schema.fields))
    with pytest.raises(BadKey, match=re.escape(message)):
        KeyEncoder(key_schema).encode_all([good, key])
