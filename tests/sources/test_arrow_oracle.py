"""Whole epochs as Arrow against Spark's reader, on this folder's session workloads
(:func:`tests.sources.conftest.checkpoints`: every Spark type, repeated field names,
removals), served by a real daemon: the client's table has the columns and types of
``spark.read.format("statestore")...toArrow()`` and the same rows; pandas, a routed
client and ``epochstate scan --format parquet|csv|ndjson`` give the same records.

Here rather than under tests/client because these workloads are made once per test
session for this folder.
"""

from __future__ import annotations

import csv
import io
import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa  # type: ignore[import-untyped]
import pyarrow.parquet as pq  # type: ignore[import-untyped]
import pytest

from epochstate.client import ResponseTooLarge, Struct, routed
from epochstate.client.arrow import (
    changes_batches_of,
    flatten_structs,
    lookups_batch,
    scan_batches,
    scan_pandas,
    scan_table,
)
from tests.fixtures.daemon import DaemonProcess
from tests.fixtures.oracle import canon, plain, spark_state
from tests.sources.conftest import BATCHES

JOBS = ("plain", "window", "dedup")


def python_values(array: pa.Array) -> list[Any]:
    """The values of ``array`` as the client and PySpark give them: structs as
    :class:`Struct` (every field, repeated names too), maps as dicts, timestamps naive UTC."""
    t = array.type
    valid = array.is_valid().to_pylist()
    if pa.types.is_struct(t):
        names = [t.field(i).name for i in range(t.num_fields)]
        children = [python_values(array.field(i)) for i in range(t.num_fields)]
        return [Struct(names, [c[j] for c in children]) if ok else None for j, ok in enumerate(valid)]
    if pa.types.is_list(t) or pa.types.is_map(t):
        offsets = array.offsets.to_pylist()
        if pa.types.is_list(t):
            flat = python_values(array.values)
            return [flat[offsets[j] : offsets[j + 1]] if ok else None for j, ok in enumerate(valid)]
        keys, items = python_values(array.keys), python_values(array.items)
        return [
            dict(zip(keys[offsets[j] : offsets[j + 1]], items[offsets[j] : offsets[j + 1]], strict=True))
            if ok
            else None
            for j, ok in enumerate(valid)
        ]
    if pa.types.is_timestamp(t) and t.tz is not None:
        return [None if v is None else v.replace(tzinfo=None) for v in array.to_pylist()]
    return list(array.to_pylist())


def as_oracle(table: pa.Table) -> dict[str, tuple[Any, Any, int]]:
    table = table.combine_chunks()
    keys, values = python_values(table.column("key").chunk(0)), python_values(table.column("value").chunk(0))
    partitions = table.column("partition_id").to_pylist()
    return {canon(k): (plain(k), plain(v), p) for k, v, p in zip(keys, values, partitions, strict=True)}


def test_whole_epochs_as_arrow_equal_sparks_reader(
    spark: Any, checkpoints: dict[str, Path], daemon_factory: Callable[..., DaemonProcess]
) -> None:
    from pyspark.sql.pandas.types import to_arrow_schema

    daemon = daemon_factory({name: str(checkpoints[name]) for name in JOBS})
    last = BATCHES - 1
    for name in JOBS:
        daemon.wait_for_epoch(name, last)
    with daemon.client() as client:
        for name in JOBS:
            # window's epoch 1 holds windows that later epochs have removed.
            for epoch in (1, last) if name == "window" else (last,):
                # Pages of three records: several pages, each asked for while one is decoded.
                ours = scan_table(client, name, epoch=epoch, page_size=3)
                frame = spark.read.format("statestore").option("batchId", epoch).load(str(checkpoints[name]))
                # Spark's own Arrow types (toArrow() itself refuses the repeated names of "plain").
                expected = to_arrow_schema(frame.schema, timezone="UTC")
                assert ours.schema.equals(expected, check_metadata=False), (name, ours.schema, expected)
                assert ours.schema.metadata[b"epochstate.epoch"] == str(epoch).encode()
                assert as_oracle(ours) == spark_state(spark, checkpoints[name], epoch), (name, epoch)

        table = scan_table(client, "plain", epoch=last)
        frame = scan_pandas(client, "plain", epoch=last)
        flat = flatten_structs(table)
        assert list(frame.columns) == flat.column_names and len(frame) == table.num_rows
        assert "value.first.a" in flat.column_names  # a struct in the value struct, flattened too
        assert frame["partition_id"].tolist() == table.column("partition_id").to_pylist()
        assert frame["value.count"].shape == (table.num_rows, 2)  # the buffer's two counts, both kept

        window = scan_table(client, "window", epoch=last)
        assert_cli_formats(daemon.target, window)
        assert scan_table(client, "window", epoch=last, page_size=2, limit=3).equals(window.slice(0, 3))
        batches = scan_batches(client, "window", epoch=last, page_size=2)
        assert next(batches).num_rows == 2
        batches.close()  # the page asked for ahead is cancelled
    with routed([daemon.target]) as through_group:
        # A routed client's scan is converted from its records (the same table).
        assert scan_table(through_group, "window", epoch=last, page_size=2).equals(window)


def test_a_page_over_the_response_limit_is_asked_for_again_in_halves(
    checkpoints: dict[str, Path], daemon_factory: Callable[..., DaemonProcess]
) -> None:
    """dedup's 7 records of 66 key fields, some 600 bytes each, are several pages under
    the smallest response limit a daemon takes (1 KiB)."""
    limits = {"EPOCHSTATE_MAX_RESPONSE_BYTES": "1024"}
    daemon = daemon_factory({"dedup": str(checkpoints["dedup"])}, env=limits)
    last = BATCHES - 1
    daemon.wait_for_epoch("dedup", last)
    with daemon.client() as client:
        with pytest.raises(ResponseTooLarge):
            list(client.scan("dedup", epoch=last, page_size=10_000))
        halved = scan_table(client, "dedup", epoch=last)
        lookups = list(client.scan("dedup", epoch=last, page_size=1))
        assert halved.num_rows == len(lookups) > 3
        assert halved.equals(
            pa.Table.from_batches([lookups_batch(lookups, client.describe("dedup").store())])
        )


def test_changes_as_arrow_are_the_differences_of_sparks_reader(
    spark: Any, checkpoints: dict[str, Path], daemon_factory: Callable[..., DaemonProcess]
) -> None:
    """Each epoch's batch of changes holds what Spark's reader says changed from the epoch
    before (epoch 0: every key): upserts with the new value and partition, deletes with
    the partition the key was in; ``epochstate changes --format parquet`` writes the
    same table."""
    daemon = daemon_factory({name: str(checkpoints[name]) for name in JOBS})
    last = BATCHES - 1
    for name in JOBS:
        daemon.wait_for_epoch(name, last)
    with daemon.client() as client:
        for name in JOBS:
            states = {e: spark_state(spark, checkpoints[name], e) for e in range(BATCHES)}
            batches = list(changes_batches_of(client, name, from_epoch=0, to_epoch=last, page_size=2))
            by_epoch = {int(b.schema.metadata[b"epochstate.epoch"]): b for b in batches}
            for epoch in range(BATCHES):
                before = states.get(epoch - 1, {})
                upserts = {k: v for k, v in states[epoch].items() if before.get(k) != v}
                deletes = {k: before[k][2] for k in set(before) - set(states[epoch])}
                batch = by_epoch.get(epoch)
                if not upserts and not deletes:
                    assert batch is None, (name, epoch)
                    continue
                assert batch is not None, (name, epoch)
                table = pa.Table.from_batches([batch])
                assert set(table.column("epoch").to_pylist()) == {epoch}
                kinds = table.column("change_type").to_pylist()
                rows = as_oracle(table.drop_columns(["epoch", "change_type"]))
                assert len(rows) == len(kinds), "a key changes once per epoch"
                got_upserts = {
                    k: v for (k, v), kind in zip(rows.items(), kinds, strict=True) if kind == "upsert"
                }
                got_deletes = {
                    k: v[2] for (k, v), kind in zip(rows.items(), kinds, strict=True) if kind == "delete"
                }
                assert got_upserts == upserts, (name, epoch)
                assert got_deletes == deletes, (name, epoch)
                assert all(v[1] is None for (k, v) in rows.items() if k in got_deletes)
        written = pq.read_table(
            io.BytesIO(
                cli(
                    daemon.target,
                    "changes",
                    "window",
                    "--from",
                    "0",
                    "--to",
                    str(last),
                    "--format",
                    "parquet",
                )
            )
        )
        feed = pa.Table.from_batches(list(changes_batches_of(client, "window", from_epoch=0, to_epoch=last)))
        assert written.equals(feed)


def cli(target: str, *args: str) -> bytes:
    command = ["scan", "window", "--epoch", str(BATCHES - 1), "--limit", "0"]
    if args and args[0] == "changes":
        command = []
    done = subprocess.run(
        [sys.executable, "-m", "epochstate.cli", *command, *args, "--target", target],
        capture_output=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr.decode()
    return done.stdout


def assert_cli_formats(target: str, table: pa.Table) -> None:
    parquet = pq.read_table(io.BytesIO(cli(target, "--format", "parquet")))
    assert parquet.equals(table) and parquet.schema.metadata == table.schema.metadata

    lines = list(csv.reader(io.StringIO(cli(target, "--format", "csv").decode())))
    flat = flatten_structs(table)
    assert lines[0] == flat.column_names and len(lines) == table.num_rows + 1
    assert [int(row[-1]) for row in lines[1:]] == table.column("partition_id").to_pylist()
    by = lines[0].index("value.count")
    assert [int(row[by]) for row in lines[1:]] == flat.column("value.count").to_pylist()

    records = [json.loads(line) for line in cli(target, "--format", "ndjson").decode().splitlines()]
    assert [r["partition"] for r in records] == table.column("partition_id").to_pylist()
    assert [r["value"]["count"] for r in records] == flat.column("value.count").to_pylist()
