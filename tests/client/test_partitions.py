"""Spark's partitioner in the client, against Spark itself.

Spark SQL's ``hash(...)`` (Murmur3Hash, seed 42) and ``pmod`` over rows of every
key type; then the partition a real stateful query put each key in (the state
reader's ``partition_id``) for multi-column keys of every supported type,
struct keys, nulls and strings of every tail length.
"""

from __future__ import annotations

import datetime as dt
import json
import math
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from epochstate.client.partitions import key_partition
from epochstate.client.values import to_row
from epochstate.core.partitioner import hash_bytes, hash_int, hash_long, spark_hash
from epochstate.core.sparktypes import parse_struct

# Every tail length (0-3 bytes past a 4-byte word), bytes > 127 in the tail, surrogates' neighbours.
STRINGS = [
    "",
    "a",
    "ab",
    "abc",
    "abcd",
    "abcde",
    "é",
    "éé",
    "日本",
    "日本語",
    "😀",
    "x😀",
    "Spark",
    "ünïcödé!",
    "\x7f\x80",
]
INTS = [0, 1, -1, 42, 2**31 - 1, -(2**31), 123456789, -987654321]
LONGS = [0, 1, -1, 2**63 - 1, -(2**63), 2**32, -(2**32) - 7, 1234567890123]
DOUBLES = [0.0, -0.0, 1.5, -2.25, math.inf, -math.inf, math.nan, 1e-300, 3.141592653589793]


def _sql_rows() -> list[dict[str, Any]]:
    rows = []
    for i in range(60):
        rows.append(
            {
                "s": STRINGS[i % len(STRINGS)] * (1 + i // len(STRINGS)) if i % 13 else None,
                "i": INTS[i % len(INTS)] if i % 11 else None,
                "l": LONGS[i % len(LONGS)],
                "sh": (i * 997) % 65536 - 32768,
                "b": i % 256 - 128,
                "bo": i % 3 == 0,
                "f": DOUBLES[i % len(DOUBLES)],
                "d": DOUBLES[(i * 7) % len(DOUBLES)] * (i + 1) if i % 9 else -0.0,
                "dec": Decimal(i * 1234567 - 40000000).scaleb(-2),
                "wide": Decimal(10**25 + i * 98765432123456789 * (-1) ** i).scaleb(-5),
                "dt": dt.date(1970, 1, 1) + dt.timedelta(days=(i - 30) * 1000),
                "ts": dt.datetime(2024, 2, 29, 13, 5, 7)
                + dt.timedelta(seconds=i * 86_401, microseconds=i * 7),
                "bin": bytes(range(i % 9)) + b"\xff" * (i % 4),
                "st": {"a": INTS[i % len(INTS)], "b": STRINGS[i % len(STRINGS)] if i % 5 else None},
                "arr": [INTS[j % len(INTS)] for j in range(i % 4)],
            }
        )
    return rows


SQL_SCHEMA = (
    "s string, i int, l long, sh short, b byte, bo boolean, f float, d double, dec decimal(10,2), "
    "wide decimal(38,5), dt date, ts timestamp, bin binary, st struct<a:int,b:string>, arr array<int>"
)


def test_murmur3_primitives_match_spark_known_values() -> None:
    # Spark's documented example: SELECT hash('Spark', array(123), 2) = -1321691492
    schema = parse_struct(json.loads(_struct_json("a string, b array<int>, c int")))
    assert spark_hash(["Spark", [123], 2], schema) == -1321691492
    # hashUnsafeBytes mixes each tail byte as a block of its own, sign-extended: a string of
    # 1-3 bytes hashes differently from the same bytes zero-padded to a word, as Spark does.
    assert hash_bytes(b"\xff", 42) != hash_bytes(b"\xff\x00\x00\x00", 42)
    assert hash_int(0, 42) != hash_long(0, 42)


@pytest.mark.spark
def test_hash_and_pmod_equal_spark_sql_for_every_key_type(spark: Any) -> None:
    from pyspark.sql import functions as F

    frame = spark.createDataFrame(_sql_rows(), SQL_SCHEMA)
    columns = [f.name for f in frame.schema.fields]
    combos = [[c] for c in columns] + [columns, ["s", "i", "dt"], ["st", "dec", "ts"], ["wide", "bin"]]
    exprs = []
    for n, combo in enumerate(combos):
        hashed = F.hash(*[F.col(c) for c in combo])
        exprs += [hashed.alias(f"h{n}"), F.expr(f"pmod(hash({', '.join(combo)}), 7)").alias(f"p{n}")]
    computed = frame.select(*columns, *exprs).collect()
    assert len(computed) == 60
    schema_json = json.loads(frame.schema.json())
    checked = 0
    for row in computed:
        for n, combo in enumerate(combos):
            fields = [f for f in schema_json["fields"] if f["name"] in combo]
            fields.sort(key=lambda f: combo.index(f["name"]))
            schema = parse_struct({"type": "struct", "fields": fields})
            key = to_row([row[c] for c in combo], schema)
            values = [row[c] for c in combo]
            assert key_partition(key, schema, 7) == row[f"p{n}"], (combo, values)
            assert key_partition(key, schema, 2**31 - 1) == row[f"h{n}"] % (2**31 - 1), (combo, values)
            checked += 1
    assert checked == 60 * len(combos)


STREAM_SCHEMA = (
    "s string, i int, l long, d double, dec decimal(10,2), wide decimal(30,4), dt date, ts timestamp, "
    "bo boolean, st struct<a:int,b:string>"
)


def _stream_rows(count: int) -> list[dict[str, Any]]:
    rows = []
    for i in range(count):
        rows.append(
            {
                "s": (STRINGS[i % len(STRINGS)] + str(i)) if i % 17 else None,
                "i": INTS[i % len(INTS)] + i if i % 19 else None,
                "l": LONGS[i % len(LONGS)] // (i + 1),
                "d": [0.0, -0.0, 1.5, -2.25, 1e10, 3.25][i % 6] + (i % 5),
                "dec": str(Decimal(i * 12345 - 500000).scaleb(-2)),
                "wide": str(Decimal(10**22 * (-1) ** i + i * 777777).scaleb(-4)),
                "dt": str(dt.date(2000, 1, 1) + dt.timedelta(days=i * 37 - 9000)),
                "ts": (dt.datetime(2021, 6, 1) + dt.timedelta(seconds=i * 3607, microseconds=i)).isoformat()
                + "Z",
                "bo": i % 2 == 0 if i % 23 else None,
                "st": {"a": i * 31 - 200, "b": STRINGS[i % len(STRINGS)] if i % 7 else None},
            }
        )
    return rows


def _state_partitions(spark: Any, tmp_path: Path, keys: list[str], partitions: int) -> list[tuple[Any, int]]:
    """Run a streaming count grouped by ``keys`` over the rows, one batch; each state key
    (as a Row) and the partition the state reader says holds it."""
    session = spark.newSession()
    session.conf.set("spark.sql.shuffle.partitions", str(partitions))
    source = tmp_path / "in"
    source.mkdir(exist_ok=True)
    with (source / "part-0.json").open("w") as out:
        for row in _stream_rows(400):
            out.write(json.dumps(row) + "\n")
    checkpoint = tmp_path / "cp"
    stream = session.readStream.schema(STREAM_SCHEMA).json(str(source))
    query = (
        stream.groupBy(*keys)
        .count()
        .writeStream.outputMode("update")
        .format("noop")
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(300)
    assert query.exception() is None
    state = session.read.format("statestore").option("batchId", 0).load(str(checkpoint))
    return [(r.key, r.partition_id) for r in state.select("key", "partition_id").collect()]


@pytest.mark.spark
@pytest.mark.parametrize(
    ("keys", "partitions"),
    [
        (["s", "i", "l", "d", "dec", "wide", "dt", "ts", "bo", "st"], 7),
        (["st"], 5),
        (["s"], 11),
        (["dec", "dt"], 3),
    ],
    ids=["every-type", "struct", "string", "decimal-date"],
)
def test_partition_equals_the_state_readers_partition_id(
    spark: Any, tmp_path: Path, keys: list[str], partitions: int
) -> None:
    found = _state_partitions(spark, tmp_path, keys, partitions)
    assert len(found) > 50
    schema_json = json.loads(spark.createDataFrame([], STREAM_SCHEMA).select(*keys).schema.json())
    schema = parse_struct(schema_json)
    assert {p for _, p in found} == set(range(partitions))  # every partition holds keys
    for key, partition in found:
        row = to_row(list(key), schema)
        assert key_partition(row, schema, partitions) == partition, key


def _struct_json(ddl: str) -> str:
    """A struct type's JSON for a tiny DDL (``name type, ...``; no nested commas)."""
    names = {"string": "string", "int": "integer", "array<int>": "array"}
    fields = []
    for part in ddl.split(", "):
        name, kind = part.split(" ", 1)
        t: Any = names[kind]
        if t == "array":
            t = {"type": "array", "elementType": "integer", "containsNull": True}
        fields.append({"name": name, "type": t, "nullable": True, "metadata": {}})
    return json.dumps({"type": "struct", "fields": fields})
