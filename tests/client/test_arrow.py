"""``epochstate.client.arrow`` in-process: Spark types to Arrow types, the columnar
decoder against the client's own value decoder on every type, changes, CSV batches,
and the error when pyarrow is missing."""

from __future__ import annotations

import datetime as dt
import functools
import subprocess
import sys
import textwrap
from decimal import Decimal
from typing import Any

import pyarrow as pa  # type: ignore[import-untyped]
import pytest

from epochstate.client.arrow import (
    arrow_type,
    changes_batch,
    changes_batches,
    changes_schema,
    lookups_batch,
    state_batch,
    state_schema,
)
from epochstate.client.arrow.batches import wire_change_arrays, wire_changes_batch
from epochstate.client.arrow.change_columns import MergedChanges
from epochstate.client.arrow.changes import epoch_batches
from epochstate.client.client import Lookup, StoreSchema
from epochstate.client.values import from_row, to_row
from epochstate.core.sparktypes import StructType, parse_struct, parse_type
from epochstate.v1 import epochstate_pb2 as pb


def struct(*fields: tuple[str, Any]) -> StructType:
    return parse_struct(
        {"type": "struct", "fields": [{"name": n, "type": t, "nullable": True} for n, t in fields]}
    )


def test_spark_types_map_to_the_arrow_types_of_sparks_reader() -> None:
    cases = {
        "boolean": pa.bool_(),
        "byte": pa.int8(),
        "short": pa.int16(),
        "integer": pa.int32(),
        "long": pa.int64(),
        "float": pa.float32(),
        "double": pa.float64(),
        "decimal(30,5)": pa.decimal128(30, 5),
        "string": pa.string(),
        "binary": pa.binary(),
        "date": pa.date32(),
        "timestamp": pa.timestamp("us", tz="UTC"),
        "timestamp_ntz": pa.timestamp("us"),
        "void": pa.null(),
    }
    for spark, arrow in cases.items():
        assert arrow_type(parse_type(spark)) == arrow, spark
    nested = parse_type(
        {
            "type": "array",
            "containsNull": False,
            "elementType": {
                "type": "map",
                "keyType": "string",
                "valueType": "long",
                "valueContainsNull": True,
            },
        }
    )
    assert arrow_type(nested) == pa.list_(
        pa.field("element", pa.map_(pa.string(), pa.int64()), nullable=False)
    )
    repeated = arrow_type(struct(("count", "long"), ("sum", "double"), ("count", "long")))
    assert [f.name for f in repeated] == ["count", "sum", "count"]


KEY = struct(("user", "string"), ("day", "date"))
VALUE = struct(
    ("count", "long"),
    ("sum", "double"),
    ("count", "long"),
    ("small", "byte"),
    ("f", "float"),
    ("ok", "boolean"),
    ("dec", "decimal(38,7)"),
    ("bin", "binary"),
    ("at", "timestamp"),
    ("ntz", "timestamp_ntz"),
    ("none", "void"),
    ("first", {"type": "struct", "fields": [
        {"name": "x", "type": "integer", "nullable": True},
        {"name": "x", "type": "string", "nullable": True},
    ]}),
    ("arr", {"type": "array", "elementType": {"type": "array", "elementType": "long", "containsNull": True},
             "containsNull": True}),
    ("m", {"type": "map", "keyType": "string", "valueType": {"type": "struct", "fields": [
        {"name": "a", "type": "integer", "nullable": True}]}, "valueContainsNull": True}),
)  # fmt: skip
STORE = StoreSchema(0, "agg", "default", 4, KEY, VALUE)
UTC = dt.timezone.utc


def values(i: int) -> list[Any]:
    """Row ``i`` of the value schema: defaults (0, "", False, empty), nulls and plain values in turn."""
    zero = i % 3 == 0
    null = i % 3 == 1
    return [
        None if null else (0 if zero else i),
        None if null else (0.0 if zero else i * 1.5),
        -i,
        None if null else (0 if zero else -(i % 100)),
        0.0 if zero else i * 0.25,
        None if null else not zero,
        None if null else (Decimal("0E-7") if zero else (Decimal(i) / 7).quantize(Decimal("1E-7"))),
        None if null else (b"" if zero else bytes(range(i % 5))),
        None if null else dt.datetime(1969, 12, 31, 23, 59, 59) + dt.timedelta(days=i),
        None if null else dt.datetime(2024, 2, 29, 12, 0, 0, 1) - dt.timedelta(hours=i),
        None,
        None if null else (i, "" if zero else f"x{i}"),
        None if null else ([] if zero else [[i, None], None, []]),
        None if null else ({} if zero else {"k": (i,), "n": None}),
    ]


def records(count: int) -> list[pb.Record]:
    out = []
    for i in range(count):
        key = (
            "" if i % 4 == 0 else f"u{i}",
            None if i % 5 == 0 else dt.date(2024, 1, 1) + dt.timedelta(days=i),
        )
        found = i % 7 != 6
        out.append(
            pb.Record(
                key=to_row(key, KEY),
                value=to_row(values(i), VALUE) if found else None,
                found=found,
                partition=i % 4 if found else 0,
            )
        )
    return out


def test_columnar_decoding_equals_the_clients_value_decoding_on_every_type() -> None:
    """The columns read straight from the Value messages equal Arrow's conversion of what
    the client's own decoder makes of each record: nulls, defaults (0, "", False, an empty
    array or map), repeated names, nested arrays, maps with struct values, absent values."""
    sent = records(60)
    fast = state_batch(sent, STORE)
    lookups = [
        Lookup(0, from_row(r.key, KEY), r.found, from_row(r.value, VALUE) if r.found else None, r.partition)
        for r in sent
    ]
    slow = lookups_batch(lookups, STORE)
    assert fast.schema == state_schema(STORE) and slow.schema.remove_metadata() == state_schema(STORE)
    assert fast.equals(slow.replace_schema_metadata(None))
    assert fast.column("value").null_count == sum(1 for r in sent if not r.found)
    first = fast.column("value").field(0).to_pylist()
    assert first[:3] == [0, None, 2]  # a 0 stays 0; a null reads as 0 and is found null


def test_a_value_sent_in_another_kind_is_decoded_whole() -> None:
    """A double sent as an int, and a decimal sent as an int (the client sends integral
    decimals so), decode to their values, not to the attribute's default."""
    schema = StoreSchema(
        0, "x", "default", 1, struct(("k", "long")), struct(("d", "double"), ("n", "decimal(10,2)"))
    )
    record = pb.Record(
        key=pb.Row(fields=[pb.Value(int=1)]),
        value=pb.Row(fields=[pb.Value(int=3), pb.Value(int=4)]),
        found=True,
    )
    assert state_batch([record], schema).column("value").to_pylist() == [{"d": 3.0, "n": Decimal("4.00")}]


def test_a_batch_of_no_records_has_the_stores_schema() -> None:
    assert state_batch([], STORE).num_rows == 0 and state_batch([], STORE).schema == state_schema(STORE)


class FakeChange:
    def __init__(self, epoch: int, change_type: str, record: pb.Record) -> None:
        self.epoch = epoch
        self.change_type = change_type
        self.key = record.key
        self.value = record.value if change_type == "upsert" else None
        self.partition = record.partition


def test_changes_batch_has_epoch_and_change_type_and_a_null_value_for_deletes() -> None:
    sent = [r for r in records(12) if r.found]
    changes = [FakeChange(3 + i // 4, "delete" if i % 3 == 2 else "upsert", r) for i, r in enumerate(sent)]
    batch = changes_batch(changes, STORE)
    assert batch.schema == changes_schema(STORE)
    assert batch.schema.names == ["epoch", "change_type", "key", "value", "partition_id"]
    assert batch.column("epoch").to_pylist() == [c.epoch for c in changes]
    deleted = [c.change_type == "delete" for c in changes]
    assert batch.column("value").is_null().to_pylist() == deleted
    upserts = state_batch([r for r, d in zip(sent, deleted, strict=True) if not d], STORE)
    kept = batch.filter(pa.array([not d for d in deleted]))
    assert kept.select(["key", "value", "partition_id"]).equals(upserts)
    batches = list(changes_batches(iter(changes), STORE, rows=4))
    assert [b.num_rows for b in batches] == [4, 4, len(changes) - 8]
    assert pa.Table.from_batches(batches).equals(pa.Table.from_batches([batch]))
    assert list(changes_batches([], STORE)) == []
    # The same changes as a Changes stream sends them (a delete's record without value).
    epoch = [c for c in changes if c.epoch == 4]
    wire = [
        pb.Change(type=pb.Change.DELETE, record=pb.Record(key=c.key, partition=c.partition))
        if c.value is None
        else pb.Change(
            type=pb.Change.UPSERT,
            record=pb.Record(key=c.key, value=c.value, found=True, partition=c.partition),
        )
        for c in epoch
    ]
    assert any(c.type == pb.Change.DELETE for c in wire)
    assert wire_changes_batch(4, wire, STORE).equals(changes_batch(epoch, STORE))


ATOMIC_KEY = struct(("user", "string"), ("day", "date"))
ATOMIC_VALUE = struct(
    ("count", "long"),
    ("sum", "double"),
    ("count", "long"),
    ("small", "byte"),
    ("f", "float"),
    ("ok", "boolean"),
    ("bin", "binary"),
    ("at", "timestamp"),
    ("ntz", "timestamp_ntz"),
    ("n", "integer"),
    ("none", "void"),
)
ATOMIC = StoreSchema(0, "agg", "default", 3, ATOMIC_KEY, ATOMIC_VALUE)


def atomic_changes(count: int) -> list[pb.Change]:
    """Changes of :data:`ATOMIC` (fields of every atomic kind, some repeated, and a void
    one): defaults (0, "", False, b""), deletes, partition 0 (which is not on the wire)."""
    out = []
    for i in range(count):
        zero = i % 3 == 0
        key = to_row(("" if zero else f"u{i}", dt.date(2024, 1, 1) + dt.timedelta(days=i)), ATOMIC_KEY)
        if i % 4 == 3:
            out.append(pb.Change(type=pb.Change.DELETE, record=pb.Record(key=key, partition=i % 3)))
            continue
        value = (
            0 if zero else i,
            0.0 if zero else i * 1.5,
            -i,
            0 if zero else -(i % 100),
            0.0 if zero else i * 0.25,
            not zero,
            b"" if zero else bytes(range(i % 5)),
            dt.datetime(1969, 12, 31, 23, 59, 59, tzinfo=UTC) + dt.timedelta(days=i),
            dt.datetime(2024, 2, 29, 12, 0, 0, 1) - dt.timedelta(hours=i),
            i - 5,
            None,
        )
        record = pb.Record(key=key, value=to_row(value, ATOMIC_VALUE), found=True, partition=i % 3)
        out.append(pb.Change(type=pb.Change.UPSERT, record=record))
    return out


def stream(epoch: int, changes: list[pb.Change], per_message: int) -> list[bytes]:
    """The messages of one epoch of a Changes stream, serialized: ``per_message`` changes
    each, then the marker."""
    chunks = [changes[i : i + per_message] for i in range(0, len(changes), per_message)]
    messages = [pb.ChangesResponse(epoch=epoch, changes=c, query_id="q", shape_first_epoch=0) for c in chunks]
    messages.append(pb.ChangesResponse(epoch=epoch, epoch_complete=True, query_id="q", committed_at_ms=9))
    return [m.SerializeToString() for m in messages]


def test_the_columns_read_merged_from_a_messages_bytes_are_the_columns_of_its_changes() -> None:
    changes = atomic_changes(40)
    assert {c.record.partition for c in changes} == {0, 1, 2}
    assert pb.Change.DELETE in {c.type for c in changes}
    data = stream(4, changes, 40)[0]
    merged = MergedChanges(data)
    assert merged.header == pb.ChangesResponse(epoch=4, query_id="q", shape_first_epoch=0)
    schema = changes_schema(ATOMIC)
    read = merged.columns(ATOMIC, schema)
    assert read is not None
    declared = wire_change_arrays(changes, ATOMIC, schema)
    for got, expected in zip(read, declared, strict=True):
        assert got.equals(expected)
    # An epoch in several messages is one batch, the same as from the parsed messages.
    sent = stream(4, changes, 15) + stream(5, changes[:3], 15)
    batches = list(epoch_batches(sent, lambda _: ATOMIC))
    assert [b.num_rows for b in batches] == [40, 3]
    parsed = [pb.ChangesResponse.FromString(m) for m in sent]
    assert batches == list(epoch_batches(parsed, lambda _: ATOMIC))
    assert batches[0].equals(wire_changes_batch(4, changes, ATOMIC))
    assert batches[0].schema.metadata == {b"epochstate.epoch": b"4", b"epochstate.query_id": b"q"}


def test_a_message_whose_counts_do_not_prove_its_columns_is_read_as_declared() -> None:
    schema = changes_schema(ATOMIC)
    nulls = atomic_changes(8)
    nulls[1].record.value.fields[2].CopyFrom(pb.Value(null=True))
    # A double sent as an int (decoded whole as declared): the kinds' counts are off by one.
    other_kind = atomic_changes(8)
    other_kind[1].record.value.fields[1].CopyFrom(pb.Value(int=3))
    no_type = atomic_changes(8)
    no_type[2].ClearField("type")
    nested = [
        pb.Change(type=pb.Change.UPSERT, record=r) if r.found else pb.Change(type=pb.Change.DELETE, record=r)
        for r in records(12)
    ]
    for changes, store in ((nulls, ATOMIC), (other_kind, ATOMIC), (no_type, ATOMIC), (nested, STORE)):
        sent = stream(2, changes, 5)
        assert MergedChanges(sent[0]).columns(store, changes_schema(store)) is None
        parsed = [pb.ChangesResponse.FromString(m) for m in sent]
        shape = functools.partial(lambda s, _: s, store)
        assert list(epoch_batches(sent, shape)) == list(epoch_batches(parsed, shape))
    (batch,) = epoch_batches(stream(2, other_kind, 8), lambda _: ATOMIC)
    assert batch.column("value").field(1).to_pylist()[1] == 3.0
    assert wire_change_arrays(nulls, ATOMIC, schema).value.field(2).to_pylist()[1] is None


BLOCK_PYARROW = """
import importlib.abc, sys

class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("pyarrow", "pandas"):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None

sys.meta_path.insert(0, Block())
"""


def run_without_pyarrow(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", BLOCK_PYARROW + textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_without_pyarrow_the_client_works_and_the_arrow_module_says_what_to_install() -> None:
    done = run_without_pyarrow(
        """
        import epochstate.client, epochstate.cli.app
        assert not any(m.split(".")[0] in ("pyarrow", "pandas") for m in sys.modules), "pyarrow imported"
        try:
            import epochstate.client.arrow
        except ImportError as error:
            print(error)
        else:
            raise SystemExit("imported")
        sys.argv = ["epochstate", "scan", "job", "--format", "parquet", "--target", "127.0.0.1:9"]
        epochstate.cli.app.main()
        """
    )
    assert done.stdout.strip() == (
        "epochstate.client.arrow needs pyarrow, which is not installed: "
        "pip install 'epochstate[arrow]' (pyarrow and pandas)"
    ), done.stderr
    assert done.returncode == 1
    assert "error: --format parquet needs pyarrow: pip install 'epochstate[arrow]'" in done.stderr


@pytest.mark.parametrize("count", [0, 1])
def test_lookups_batch_of_few_lookups(count: int) -> None:
    sent = records(count)
    lookups = [
        Lookup(5, from_row(r.key, KEY), r.found, from_row(r.value, VALUE), r.partition, "q") for r in sent
    ]
    batch = lookups_batch(lookups, STORE)
    assert batch.num_rows == count
    assert (batch.schema.metadata or {}).get(b"epochstate.epoch") == (b"5" if count else None)
