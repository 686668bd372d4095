"""A query restarted with a changed state schema: each epoch is served with its own.

What Spark 4.0 does across a restart (checked here with real queries): a change
its compatibility check accepts (field names, nullability) keeps the store's
schema file as it was, so epochs before and after read with the first schema (as
Spark's reader has them); an incompatible one (another number or type of fields)
stops the query. Spark writes a new schema file only when the store has none, so
a rewritten schema file is a new schema from the run's first epoch on.

The daemon tells a rewritten file by its content, never by modification times:
the same test runs with the checkpoint on S3 (a mirror uploads Spark's files in
order), whose times have whole seconds.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from epochstate.client import EpochStateClient, InvalidArgument
from tests.e2e.test_reads import SCHEMA, counts, orders
from tests.fixtures.daemon import DaemonProcess
from tests.fixtures.oracle import canon, plain, spark_state
from tests.fixtures.s3 import CheckpointMirror, S3Server
from tests.fixtures.streams import FileStream


def renamed(frame: Any) -> Any:
    from pyspark.sql import functions as F

    return frame.groupBy(F.col("user").alias("customer")).agg(
        F.count("*").alias("orders"), F.sum("amount").alias("spent")
    )


def renamed_not_null(frame: Any) -> Any:
    from pyspark.sql import functions as F

    return frame.groupBy(F.coalesce("user", F.lit("?")).alias("customer")).agg(
        F.count("*").alias("orders"), F.sum("amount").alias("spent")
    )


def with_max(frame: Any) -> Any:
    from pyspark.sql import functions as F

    return frame.groupBy("user").agg(
        F.count("*").alias("orders"), F.sum("amount").alias("spent"), F.max("amount").alias("top")
    )


def _scanned(client: EpochStateClient, job: str, epoch: int) -> dict[str, Any]:
    return {
        canon(lk.key): (plain(lk.key), plain(lk.value), lk.partition) for lk in client.scan(job, epoch=epoch)
    }


def _run(stream: FileStream, batches: range) -> None:
    stream.start(fresh=False)
    try:
        for batch in batches:
            stream.feed(orders(batch))
    finally:
        stream.stop()


@pytest.mark.parametrize("where", ["local", "s3"])
def test_restart_with_changed_schema_serves_each_epoch_with_its_own(
    where: str, spark: Any, tmp_path: Path, daemon_factory: Callable[..., DaemonProcess], request: Any
) -> None:
    checkpoint = tmp_path / "cp"
    checkpoint.mkdir()
    stream = FileStream(spark, tmp_path / "in", checkpoint, counts, SCHEMA).start()
    mirror: CheckpointMirror | None = None
    if where == "s3":
        server: S3Server = request.getfixturevalue("s3_server")
        mirror = CheckpointMirror(server, checkpoint, server.new_bucket(), "cp").start()
        request.addfinalizer(mirror.stop)
        daemon = daemon_factory({"evolve": mirror.uri}, env=server.env, wait=False)
    else:
        daemon = daemon_factory({"evolve": str(checkpoint)}, wait=False)  # followed before its first commit
    try:
        for batch in range(2):  # epochs 0, 1
            stream.feed(orders(batch))
    finally:
        stream.stop()
    stream.build = renamed  # compatible: Spark keeps the schema file
    _run(stream, range(2, 3))  # epoch 2
    daemon.wait_for_epoch("evolve", 2)
    with daemon.client() as client:
        before = {e: _scanned(client, "evolve", e) for e in range(3)}
        (store,) = client.describe("evolve", refresh=True).stores
        assert store.key.names == ("user",) and not store.earlier
        assert [j.provider for j in client.jobs()] == ["hdfs"]  # learnt at the first commit
    for epoch, state in before.items():
        assert state == spark_state(spark, checkpoint, epoch), f"epoch {epoch}"

    stream.build = with_max  # incompatible: Spark refuses to run it
    with pytest.raises(Exception, match="STATE_STORE_VALUE_SCHEMA_NOT_COMPATIBLE"):
        _run(stream, range(3, 4))
    stream.files -= 1  # that batch's input is read by the next run
    assert stream.committed() == [0, 1, 2]

    for schema_file in checkpoint.glob("state/0/*/_metadata/*schema*"):
        schema_file.unlink()  # Spark writes the next run's schema anew
    stream.build = renamed_not_null
    _run(stream, range(4, 6))  # epochs 3, 4
    daemon.wait_for_epoch("evolve", 4)
    with daemon.client() as client:
        (store,) = client.describe("evolve", refresh=True).stores
        in_spark = spark.read.format("statestore").option("batchId", 4).load(str(checkpoint)).schema
        new_names = tuple(in_spark["key"].dataType.names)  # Spark names the key expression
        assert store.key.names == new_names != ("user",)
        # As Spark wrote it (nullable since 4.1: alwaysNullableOutput is pinned per query).
        assert store.key.fields[0].nullable == in_spark["key"].dataType.fields[0].nullable
        assert store.first_epoch == 3
        (old,) = store.earlier
        assert old.first_epoch == 0 and old.key.names == ("user",) and old.key.fields[0].nullable
        assert old.value == store.value
        _assert_cli_describes(daemon, store.key)

        for epoch in (3, 4):  # Spark's reader reads new epochs with the new schema
            assert _scanned(client, "evolve", epoch) == spark_state(spark, checkpoint, epoch)
        for epoch, state in before.items():  # old epochs as they were answered
            assert _scanned(client, "evolve", epoch) == state, f"epoch {epoch}"
        # Spark's reader, knowing only the newest schema, names old epochs' keys anew.
        old_in_spark = spark_state(spark, checkpoint, 1)
        assert sorted(canon(v) for _, v, _ in old_in_spark.values()) == sorted(
            canon(v) for _, v, _ in before[1].values()
        )
        assert all(tuple(k) == new_names for k, _, _ in old_in_spark.values())

        # Keys are named, and answers shaped, by the schema in force at the pinned epoch.
        assert client.get("evolve", {"user": "u1"}, epoch=1).key.fields == (("user", "u1"),)
        assert client.get("evolve", {new_names[0]: "u1"}, epoch=4).key.fields == ((new_names[0], "u1"),)
        with pytest.raises(ValueError, match="unknown field"):
            client.get("evolve", {"user": "u1"}, epoch=4)
        with pytest.raises(InvalidArgument, match="1 field"):
            client.get("evolve", ["u1", 2], epoch=1)
    daemon.stop()

    daemon.start()  # the schema versions are persisted with their epochs
    with daemon.client() as client:
        (store,) = client.describe("evolve", refresh=True).stores
        assert [s.first_epoch for s in store.earlier] == [0] and store.first_epoch == 3
        assert _scanned(client, "evolve", 1) == before[1]


def _assert_cli_describes(daemon: DaemonProcess, newest_key: Any) -> None:
    """``epochstate describe`` shows both schema versions with the epoch each starts at."""
    from epochstate.core.sparktypes import type_to_simple_string

    def cli(*args: str) -> str:
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "epochstate.cli.app",
                "describe",
                "evolve",
                "--target",
                daemon.target,
                *args,
            ],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 0, done.stderr
        return done.stdout

    (store,) = json.loads(cli("--json"))["stores"]
    assert store["from_epoch"] == 3 and store["key"] == type_to_simple_string(newest_key)
    assert [(e["from_epoch"], e["key"]) for e in store["earlier"]] == [(0, "struct<user:string>")]
    # Piped, the table is tab-separated: one row per line, every cell in full.
    cells = [line.split("\t") for line in cli().splitlines() if "struct<" in line]
    # The store's row (from epoch 3, newest key), then its earlier version's (from 0).
    assert [(c[5], c[6]) for c in cells] == [
        ("3", type_to_simple_string(newest_key)),
        ("0", "struct<user:string>"),
    ]
