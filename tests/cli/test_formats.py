"""``--format csv``'s batches: structs flattened at every depth, binary as base64, arrays
and maps as the JSON ``--json`` writes (the CLI's formats against the real daemon and
Spark's reader: tests/sources/test_arrow_oracle.py)."""

from __future__ import annotations

from epochstate.cli.formats import csv_batch
from epochstate.client.arrow import state_batch
from tests.client.test_arrow import STORE, records


def test_csv_batches_flatten_structs_and_write_nested_values_as_json() -> None:
    batch = csv_batch(state_batch(records(7), STORE))
    names = batch.schema.names
    assert names[:3] == ["key.user", "key.day", "value.count"]
    assert names.count("value.count") == 2 and names.count("value.first.x") == 2
    assert names[-1] == "partition_id"
    row = dict(zip(names, [column[2].as_py() for column in batch.columns], strict=True))
    assert row["value.bin"] == "AAE="  # base64, as --json writes binary
    assert row["value.arr"] == "[[2,null],null,[]]"
    assert row["value.m"] == '{"k":{"a":2},"n":null}'
    assert batch.column(names.index("value.bin"))[6].as_py() is None  # record 6 has no value
