"""Records and changes decoded merged (one parse of a whole response) give what decoding
each record as declared gives: the same Python types and values, for every kind a
``Value`` holds, nulls, nested values, absent keys, partition 0 and rows the counts
cannot prove (which are decoded as declared)."""

from __future__ import annotations

import datetime as dt
import random
from collections.abc import Callable
from decimal import Decimal
from typing import Any

import pytest

from epochstate.client import merged
from epochstate.client.client import StoreSchema, _lookup, _lookups
from epochstate.client.over_time import _merged_changes, change_of, changes_of
from epochstate.client.structs import Struct
from epochstate.client.values import to_row, to_value
from epochstate.core.sparktypes import StructType, parse_struct
from epochstate.v1 import epochstate_pb2 as pb


def struct(*fields: tuple[str, Any]) -> dict[str, Any]:
    return {
        "type": "struct",
        "fields": [{"name": n, "type": t, "nullable": True, "metadata": {}} for n, t in fields],
    }


def array(element: Any) -> dict[str, Any]:
    return {"type": "array", "elementType": element, "containsNull": True}


def map_of(key: Any, value: Any) -> dict[str, Any]:
    return {"type": "map", "keyType": key, "valueType": value, "valueContainsNull": True}


KEY = parse_struct(struct(("user", "long"), ("region", "string")))
# Every atomic type, a void field, a decimal, and each nested kind (with a repeated name).
VALUE = parse_struct(
    struct(
        ("flag", "boolean"),
        ("b", "byte"),
        ("s", "short"),
        ("i", "integer"),
        ("n", "long"),
        ("f", "float"),
        ("d", "double"),
        ("text", "string"),
        ("raw", "binary"),
        ("day", "date"),
        ("at", "timestamp"),
        ("local", "timestamp_ntz"),
        ("nothing", "void"),
        ("amount", "decimal(12,3)"),
        ("inner", struct(("x", "long"), ("x", "string"))),
        ("items", array("long")),
        ("tags", map_of("string", "double")),
        ("grid", map_of(array("long"), "long")),
        ("n", "long"),
    )
)
STORE = StoreSchema(0, "agg", "default", 4, KEY, VALUE)


def value_of(rng: random.Random, i: int, nulls: bool) -> tuple[Any, ...]:
    def maybe(v: Any) -> Any:
        return None if nulls and rng.random() < 0.2 else v

    return (
        maybe(i % 2 == 0),
        maybe(-i % 128),
        maybe(i * 7),
        maybe(-i),
        maybe(i * 10**12),
        maybe(i / 4),
        maybe(-i / 3),
        maybe(f"t{i}é"),
        maybe(bytes([i % 256, 0])),
        maybe(dt.date(2020, 1, 1) + dt.timedelta(days=i)),
        maybe(dt.datetime(1969, 12, 31, 23, 59) + dt.timedelta(microseconds=i * 1001)),
        maybe(dt.datetime(2030, 5, 6) - dt.timedelta(seconds=i)),
        None,
        maybe(Decimal(f"{i}.{i % 1000:03d}")),
        maybe((i, maybe(str(i)))),
        maybe([i, maybe(i + 1), 0]),
        maybe({f"k{i}": maybe(i / 2), "z": 0.0}),
        maybe([([i, 1], 2)]),
        maybe(0),
    )


def records(count: int, *, nulls: bool, missing: bool) -> list[pb.Record]:
    rng = random.Random(count * 2 + nulls)
    out = []
    for i in range(count):
        key = to_row((i, f"r{i % 3}"), KEY)
        if missing and i % 3 == 1:
            out.append(pb.Record(key=key, found=False))
        else:
            out.append(
                pb.Record(key=key, value=to_row(value_of(rng, i, nulls), VALUE), found=True, partition=i % 4)
            )
    return out


def same(got: Any, want: Any) -> None:
    """Equal, of the same types all the way down (1, 1.0 and True are equal otherwise)."""
    assert type(got) is type(want), (got, want)
    if isinstance(want, Struct):
        assert got.names == want.names
    if isinstance(want, (tuple, list)):
        assert len(got) == len(want)
        for g, w in zip(got, want, strict=True):
            same(g, w)
    elif isinstance(want, dict):
        assert list(got) == list(want)
        for k in want:
            same(got[k], want[k])
    elif hasattr(want, "__dataclass_fields__"):
        for name in want.__dataclass_fields__:
            same(getattr(got, name), getattr(want, name))
    else:
        assert got == want


def as_declared(response: pb.MultiGetResponse, schema: StoreSchema) -> list[Any]:
    return [_lookup(response.epoch, r, schema, response.query_id, response.job) for r in response.records]


@pytest.mark.parametrize(("nulls", "missing"), [(False, False), (False, True), (True, False), (True, True)])
def test_merged_records_decode_as_declared(nulls: bool, missing: bool) -> None:
    response = pb.MultiGetResponse(
        shape_first_epoch=0, epoch=7, query_id="q", job="j", records=records(40, nulls=nulls, missing=missing)
    )
    # Read merged, nulls placed by each Value's bytes.
    assert merged.records(response.SerializeToString(), 40, KEY, VALUE) is not None
    same(_lookups(response, STORE), as_declared(response, STORE))
    scan = pb.ScanResponse.FromString(response.SerializeToString())
    same(_lookups(scan, STORE), as_declared(response, STORE))


def test_every_value_kind_merged() -> None:
    """Each kind's column converted as from_value converts one value of it."""
    response = pb.MultiGetResponse(shape_first_epoch=0, records=records(6, nulls=False, missing=False))
    got = _lookups(response, STORE)
    assert merged.records(response.SerializeToString(), 6, KEY, VALUE) is not None
    first = got[1].value
    assert first is not None
    assert first["day"] == dt.date(2020, 1, 2) and first["amount"] == Decimal("1.001")
    assert first["at"] == dt.datetime(1969, 12, 31, 23, 59, 0, 1001) and first["nothing"] is None
    assert first["inner"].names == ("x", "x") and first["inner"] == (1, "1")
    assert first["items"] == [1, 2, 0] and first["tags"] == {"k1": 0.5, "z": 0.0}
    assert first["grid"] == [([1, 1], 2)]  # an unhashable key: the pairs
    assert first.getall("n") == (10**12, 0) and first["raw"] == b"\x01\x00"


def row_of(*values: pb.Value) -> pb.Row:
    return pb.Row(fields=list(values))


def test_rows_the_counts_do_not_prove_are_decoded_as_declared() -> None:
    key = parse_struct(struct(("a", "long"), ("b", "long")))
    value = parse_struct(struct(("v", "string")))
    schema = StoreSchema(0, "agg", "default", 1, key, value)
    good = row_of(pb.Value(int=1), pb.Value(int=2))
    odd_rows = [
        row_of(pb.Value(int=1)),  # a field short
        row_of(pb.Value(int=1), pb.Value(int=2), pb.Value(int=3)),  # one too many
        row_of(pb.Value(int=1), pb.Value(string="2")),  # another kind than the schema's
        row_of(pb.Value(), pb.Value(int=2)),  # no kind at all
        row_of(pb.Value(int=1), pb.Value(null=False)),  # a null written otherwise
        row_of(pb.Value(int=1), pb.Value(struct=row_of(pb.Value(int=5)))),
    ]
    for odd in odd_rows:
        rs = [pb.Record(key=good, value=row_of(pb.Value(string="x")), found=True) for _ in range(5)]
        rs.insert(2, pb.Record(key=odd, value=row_of(pb.Value(string="y")), found=True, partition=3))
        response = pb.MultiGetResponse(shape_first_epoch=0, epoch=1, records=rs)
        assert merged.records(response.SerializeToString(), len(rs), key, value) is None
        same(_lookups(response, schema), as_declared(response, schema))
    # Nulls, with a row a field short: the Values are not one per field.
    x = row_of(pb.Value(string="x"))
    rs = [pb.Record(key=row_of(pb.Value(int=1), pb.Value(null=True)), value=x, found=True) for _ in range(5)]
    rs[1].key.fields.pop()
    response = pb.MultiGetResponse(shape_first_epoch=0, epoch=1, records=rs)
    assert merged.records(response.SerializeToString(), len(rs), key, value) is None
    same(_lookups(response, schema), as_declared(response, schema))
    # A found record without its value row, and a value row where none is found.
    rs = [pb.Record(key=good, value=row_of(pb.Value(string="x")), found=True) for _ in range(5)]
    rs[1] = pb.Record(key=good, found=True)
    rs[3] = pb.Record(key=good, value=row_of(pb.Value(string="z")), found=False, partition=2)
    response = pb.MultiGetResponse(shape_first_epoch=0, epoch=1, records=rs)
    same(_lookups(response, schema), as_declared(response, schema))


def test_small_and_empty_schemas() -> None:
    empty = StructType(())
    schema = StoreSchema(0, "agg", "default", 1, KEY, empty)
    rs = [pb.Record(key=to_row((i, "a"), KEY), value=pb.Row(), found=True, partition=i) for i in range(9)]
    response = pb.MultiGetResponse(shape_first_epoch=0, records=rs)
    assert merged.records(response.SerializeToString(), 9, KEY, empty) is not None
    same(_lookups(response, schema), as_declared(response, schema))
    assert _lookups(pb.MultiGetResponse(shape_first_epoch=0), schema) == []


def changes_message(
    count: int, *, nulls: bool, types: list[pb.Change.Type.ValueType] | None = None
) -> pb.ChangesResponse:
    rng = random.Random(count)
    kinds = types or [pb.Change.Type.DELETE if i % 4 == 3 else pb.Change.Type.UPSERT for i in range(count)]
    changes = []
    for i, kind in enumerate(kinds):
        key = to_row((i, "r"), KEY)
        if kind == pb.Change.Type.DELETE:
            record = pb.Record(key=key, partition=i % 3)
        else:
            record = pb.Record(
                key=key, value=to_row(value_of(rng, i, nulls), VALUE), found=True, partition=i % 3
            )
        changes.append(pb.Change(type=kind, record=record))
    return pb.ChangesResponse(shape_first_epoch=0, epoch=4, query_id="q", changes=changes)


@pytest.mark.parametrize("nulls", [False, True])
def test_merged_changes_decode_as_declared(nulls: bool) -> None:
    message = changes_message(30, nulls=nulls)
    declared = [change_of(4, c, KEY, VALUE) for c in message.changes]
    assert _merged_changes(message.SerializeToString(), 30, KEY, VALUE) is not None
    same(changes_of(message, KEY, VALUE), declared)
    assert {c.type for c in declared} == {"upsert", "delete"}
    upserts = changes_message(8, nulls=False, types=[pb.Change.Type.UPSERT] * 8)
    same(changes_of(upserts, KEY, VALUE), [change_of(4, c, KEY, VALUE) for c in upserts.changes])


def test_changes_the_counts_do_not_prove_are_decoded_as_declared() -> None:
    kinds = [pb.Change.Type.UPSERT] * 6
    kinds[2] = pb.Change.Type.TYPE_UNSPECIFIED
    message = changes_message(6, nulls=False, types=kinds)
    assert _merged_changes(message.SerializeToString(), 6, KEY, VALUE) is None
    same(changes_of(message, KEY, VALUE), [change_of(4, c, KEY, VALUE) for c in message.changes])
    # A delete that kept its value and an upsert without one: as many value rows as upserts.
    message = changes_message(8, nulls=False)
    message.changes[3].record.value.CopyFrom(message.changes[0].record.value)
    message.changes[5].record.ClearField("value")
    assert _merged_changes(message.SerializeToString(), 8, KEY, VALUE) is None
    same(changes_of(message, KEY, VALUE), [change_of(4, c, KEY, VALUE) for c in message.changes])


def test_a_value_of_any_kind_converts_as_from_value() -> None:
    """The converters of merged columns, kind by kind, against from_value."""
    from epochstate.client.values import from_value

    for i, f in enumerate(VALUE.fields):
        kind = merged.kinds_of(VALUE)[i]
        sample = value_of(random.Random(1), 5, False)[i]
        v = to_value(sample, f.type)
        if kind == merged.NULL:
            continue
        response = pb.MultiGetResponse(
            shape_first_epoch=0,
            records=[
                pb.Record(
                    key=to_row((1, "a"), KEY),
                    value=to_row(value_of(random.Random(1), 5, False), VALUE),
                    found=True,
                )
            ]
            * 4,
        )
        got = _lookups(response, STORE)[0].value
        assert got is not None
        same(got[i], from_value(v, f.type))


def test_first_records_only_and_a_pinned_answer() -> None:
    response = pb.MultiGetResponse(
        shape_first_epoch=0, epoch=7, query_id="q", job="j", records=records(12, nulls=True, missing=True)
    )
    declared = as_declared(response, STORE)
    same(_lookups(response, STORE, first=3), declared[:3])
    same(_lookups(response, STORE, first=0), [])
    same(_lookups(response, STORE, first=20), declared)
    pinned = _lookups(response, STORE, (9, "p", ""))
    assert {(lk.epoch, lk.query_id, lk.job) for lk in pinned} == {(9, "p", "")}
    assert [(lk.key, lk.value) for lk in pinned] == [(lk.key, lk.value) for lk in declared]


ATOMS = [
    "boolean",
    "long",
    "integer",
    "double",
    "string",
    "binary",
    "date",
    "timestamp",
    "void",
    "decimal(9,2)",
]


def random_type(rng: random.Random, depth: int = 0) -> Any:
    pick = rng.random()
    if depth < 2 and pick < 0.1:
        return struct(*((f"f{i}", random_type(rng, depth + 1)) for i in range(rng.randint(0, 3))))
    if depth < 2 and pick < 0.15:
        return array(random_type(rng, depth + 1))
    if depth < 2 and pick < 0.2:
        return map_of(rng.choice(["string", "long"]), random_type(rng, depth + 1))
    return rng.choice(ATOMS)


def random_value(rng: random.Random, t: Any, null_share: float) -> Any:
    if t == "void" or rng.random() < null_share:
        return None
    if isinstance(t, dict):
        if t["type"] == "struct":
            return tuple(random_value(rng, f["type"], null_share) for f in t["fields"])
        if t["type"] == "array":
            return [random_value(rng, t["elementType"], null_share) for _ in range(rng.randint(0, 3))]
        return {
            random_value(rng, t["keyType"], 0.0): random_value(rng, t["valueType"], null_share)
            for _ in range(rng.randint(0, 2))
        }
    makers: dict[str, Callable[[], Any]] = {
        "boolean": lambda: rng.random() < 0.5,
        "long": lambda: rng.randint(-(2**63), 2**63 - 1),
        "integer": lambda: rng.randint(-5, 5),
        "double": lambda: rng.choice([0.0, -1.5, 1e300]),
        "string": lambda: rng.choice(["", "a", "ü" * 3]),
        "binary": lambda: rng.randbytes(rng.randint(0, 3)),
        "date": lambda: dt.date(1, 1, 1) + dt.timedelta(days=rng.randint(0, 3_000_000)),
        "timestamp": lambda: dt.datetime(1900, 1, 1) + dt.timedelta(microseconds=rng.randint(0, 2**55)),
        "decimal(9,2)": lambda: Decimal(rng.randint(-(10**9) + 1, 10**9 - 1)) / 100,
    }
    return makers[t]()


@pytest.mark.parametrize("seed", range(12))
def test_random_schemas_decode_as_declared(seed: int) -> None:
    rng = random.Random(seed)
    fields = [(f"c{i}", random_type(rng)) for i in range(rng.randint(1, 6))]
    value = parse_struct(struct(*fields))
    schema = StoreSchema(0, "agg", "default", 3, KEY, value)
    null_share = rng.choice([0.0, 0.0, 0.3])
    rs = []
    for i in range(25):
        row = to_row(tuple(random_value(rng, t, null_share) for _, t in fields), value)
        found = rng.random() < 0.8
        rs.append(
            pb.Record(key=to_row((i, "k"), KEY), value=row if found else None, found=found, partition=i % 3)
        )
    response = pb.MultiGetResponse(shape_first_epoch=0, epoch=2, records=rs)
    same(_lookups(response, schema), as_declared(response, schema))
    kinds = [pb.Change.Type.UPSERT if r.found else pb.Change.Type.DELETE for r in rs]
    message = pb.ChangesResponse(
        shape_first_epoch=0,
        epoch=2,
        changes=[pb.Change(type=k, record=r) for k, r in zip(kinds, rs, strict=True)],
    )
    same(changes_of(message, KEY, value), [change_of(2, c, KEY, value) for c in message.changes])


@pytest.mark.parametrize("partitions", [(0,), (5,), (0, 5), (5, 0, 0)])
def test_partitions_zero_or_not(partitions: tuple[int, ...]) -> None:
    """A zero partition is not on the wire: every one, none or some of them zero."""
    rs = [
        pb.Record(
            key=to_row((i, "k"), KEY), value=to_row(value_of(random.Random(i), i, False), VALUE), found=True
        )
        for i in range(9)
    ]
    for i, r in enumerate(rs):
        r.partition = partitions[i % len(partitions)]
    response = pb.MultiGetResponse(shape_first_epoch=0, records=rs)
    assert merged.records(response.SerializeToString(), 9, KEY, VALUE) is not None
    same(_lookups(response, STORE), as_declared(response, STORE))
    message = pb.ChangesResponse(
        shape_first_epoch=0, epoch=1, changes=[pb.Change(type=pb.Change.Type.UPSERT, record=r) for r in rs]
    )
    assert _merged_changes(message.SerializeToString(), 9, KEY, VALUE) is not None
    same(changes_of(message, KEY, VALUE), [change_of(1, c, KEY, VALUE) for c in message.changes])


def test_records_of_no_named_shape_are_decoded_as_declared() -> None:
    """A response that does not name its records' shape (a daemon before shapes) may be
    decoded with a schema its rows were not written in: as declared, by each Value's kind."""
    key = parse_struct(struct(("a", "long"), ("b", "string")))
    schema = StoreSchema(0, "agg", "default", 1, key, StructType(()))
    swapped = row_of(pb.Value(string="s"), pb.Value(int=1))
    rs = [pb.Record(key=swapped, value=pb.Row(), found=True) for _ in range(6)]
    response = pb.MultiGetResponse(epoch=1, records=rs)
    got = _lookups(response, schema)
    same(got, as_declared(response, schema))
    assert got[0].key == ("s", 1)
    message = pb.ChangesResponse(
        epoch=1, changes=[pb.Change(type=pb.Change.Type.UPSERT, record=r) for r in rs]
    )
    same(
        changes_of(message, key, StructType(())),
        [change_of(1, c, key, StructType(())) for c in message.changes],
    )
