"""Struct values whose schema repeats a field name, end to end: a real Spark aggregation
whose state buffer holds ``count`` three times, read through a real daemon by the
client and the CLI, every field back in schema order and equal to Spark's reader."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from epochstate.client import AmbiguousField, Struct
from tests.cli.invoke import epochstate
from tests.fixtures.daemon import DaemonProcess
from tests.fixtures.oracle import assert_store_equals_oracle, plain, spark_store
from tests.fixtures.streams import FileStream

SCHEMA = "user string, amount long, region string"


def buffers(frame: Any) -> Any:
    """count(*), avg(amount) and count(region): the buffer is ``count``, ``sum``,
    ``count``, ``count``; first(struct(...)) adds ``first``, a struct whose two
    fields are both named ``x``, and ``valueSet``."""
    from pyspark.sql import functions as F

    return frame.groupBy("user").agg(
        F.count("*"),
        F.avg("amount"),
        F.count("region"),
        F.first(F.struct(F.col("region").alias("x"), F.col("amount").alias("x"))),
    )


def orders(batch: int) -> list[dict[str, Any]]:
    return [
        {"user": f"u{(batch + i) % 3}", "amount": batch * 10 + i, "region": None if i == 2 else f"r{i}"}
        for i in range(4)
    ]


def test_repeated_buffer_names_come_back_whole_and_equal_to_spark(
    spark: Any, tmp_path: Path, daemon_factory: Callable[..., DaemonProcess]
) -> None:
    checkpoint = tmp_path / "cp"
    stream = FileStream(spark, tmp_path / "in", checkpoint, buffers, SCHEMA, name="buffers").start()
    try:
        for batch in range(3):
            stream.feed(orders(batch))
    finally:
        stream.stop()
    epochs = stream.committed()
    daemon = daemon_factory({"buffers": str(checkpoint)})
    daemon.wait_for_epoch("buffers", epochs[-1])

    oracle = spark_store(spark, checkpoint, epochs)
    in_spark = spark.read.format("statestore").option("batchId", epochs[-1]).load(str(checkpoint))
    spark_names = tuple(in_spark.schema["value"].dataType.names)
    assert spark_names.count("count") == 3, spark_names  # what the test is about
    with daemon.client() as client:
        (store,) = client.describe("buffers").stores
        assert store.value.names == spark_names
        # Every key at every epoch, by MultiGet and by a paged Scan: equal to Spark's
        # reader, compared field by field in schema order (names repeat, so as pairs).
        assert_store_equals_oracle(client, "buffers", oracle)

        rows = {r.key.user: r.value for r in in_spark.collect()}
        for lookup in client.scan("buffers", epoch=epochs[-1]):
            value, row = lookup.value, rows[lookup.key["user"]]
            assert isinstance(value, Struct) and value.names == spark_names
            assert value == tuple(row)  # positions, nested struct included
            assert value.getall("count") == tuple(
                v for n, v in zip(row.__fields__, row, strict=True) if n == "count"
            )
            assert value["sum"] == row["sum"]
            with pytest.raises(AmbiguousField, match=r"'count' occurs 3 times \(positions 0, 2, 3\)"):
                value["count"]
            with pytest.raises(AmbiguousField):
                value.asdict()
            nested = value["first"]  # first()'s buffer: first, valueSet
            assert isinstance(nested, Struct) and nested.names == ("x", "x")
            assert nested.fields == tuple(zip(row["first"].__fields__, row["first"], strict=True))

    # The CLI: a struct with a repeated name is an array of [name, value] pairs.
    last = epochs[-1]
    done = epochstate(daemon.target, "get", "buffers", "u1", "--epoch", str(last), "--json")
    assert done.returncode == 0, done.stderr
    record = json.loads(done.stdout)
    assert record["key"] == {"user": "u1"}  # unique names: an object
    assert record["value"] == _pairs(rows["u1"])
    scanned = epochstate(daemon.target, "scan", "buffers", "--epoch", str(last), "--json")
    assert scanned.returncode == 0, scanned.stderr
    lines = [json.loads(line) for line in scanned.stdout.splitlines()]
    assert {r["key"]["user"]: r["value"] for r in lines} == {u: _pairs(row) for u, row in rows.items()}
    assert plain(rows["u1"]) == _pairs(rows["u1"])  # the oracle's form is the CLI's


def _pairs(row: Any) -> Any:
    """A Spark Row as the CLI prints it: pairs when names repeat, else an object."""
    if not hasattr(row, "__fields__"):
        return row
    names = list(row.__fields__)
    if len(set(names)) == len(names):
        return {n: _pairs(v) for n, v in zip(names, row, strict=True)}
    return [[n, _pairs(v)] for n, v in zip(names, row, strict=True)]
