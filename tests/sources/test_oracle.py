"""The sources layer against Spark's own state reader (``format("statestore")``)."""

from __future__ import annotations

import functools
import shutil
import time
from pathlib import Path
from typing import Any

import pytest

from epochstate.daemon.sources.changes import StateChange
from epochstate.daemon.sources.checkpoint import Checkpoint
from epochstate.daemon.sources.errors import MissingStateFile
from epochstate.daemon.sources.hdfs_provider import HdfsStoreReader
from epochstate.daemon.sources.sparktypes import (
    ArrayType,
    AtomicType,
    DecimalType,
    MapType,
    StructType,
)
from tests.sources.sparkvalues import freeze, from_spark

pytestmark = pytest.mark.spark

Entry = tuple[int, Any, Any]  # (partition, frozen key, frozen value)


JOIN_STORES = (
    "left-keyToNumValues",
    "left-keyWithIndexToValue",
    "right-keyToNumValues",
    "right-keyWithIndexToValue",
)
CASES = [
    ("plain", "default"),
    ("window", "default"),
    ("dedup", "default"),
    *(("join", store) for store in JOIN_STORES),
]


def _oracle(spark: Any, root: Path, store: str, epochs: list[int]) -> dict[int, set[Entry]]:
    """Spark's state reader at each epoch, all epochs in one Spark job."""
    from pyspark.sql import DataFrame
    from pyspark.sql import functions as F

    checkpoint = Checkpoint(root)
    key_schema, value_schema = checkpoint.store_schema(0, store)
    frames = [
        spark.read.format("statestore")
        .option("batchId", epoch)
        .option("operatorId", 0)
        .option("storeName", store)
        .load(str(root))
        .withColumn("_epoch", F.lit(epoch))
        for epoch in epochs
    ]
    result: dict[int, set[Entry]] = {epoch: set() for epoch in epochs}
    rows = functools.reduce(DataFrame.unionByName, frames).collect()
    for row in rows:
        entry = (
            row["partition_id"],
            freeze(from_spark(row["key"], key_schema)),
            freeze(from_spark(row["value"], value_schema)),
        )
        assert entry not in result[row["_epoch"]]
        result[row["_epoch"]].add(entry)
    return result


def _frozen(changes: list[StateChange]) -> set[Entry]:
    entries = {(c.partition, freeze(c.key), freeze(c.value)) for c in changes}
    assert len(entries) == len(changes), "a key appears twice"
    return entries


Oracle = dict[tuple[str, str], dict[int, set[Entry]]]


@pytest.fixture(scope="module")
def oracle(spark: Any, checkpoints: dict[str, Path]) -> Oracle:
    return {
        (name, store): _oracle(
            spark, checkpoints[name], store, Checkpoint(checkpoints[name]).committed_epochs()
        )
        for name, store in CASES
    }


@pytest.mark.parametrize(("name", "store"), CASES)
def test_full_state_and_changes_equal_spark_reader(
    name: str, store: str, checkpoints: dict[str, Path], oracle: Oracle
) -> None:
    checkpoint = Checkpoint(checkpoints[name])
    reader = HdfsStoreReader.open(checkpoint, 0, store)
    epochs = checkpoint.committed_epochs()
    assert epochs == list(range(len(epochs))) and len(epochs) >= 4
    accumulated: dict[tuple[int, Any], Any] = {}
    removals = 0
    for epoch in epochs:
        version = epoch + 1
        assert reader.has_delta(version)
        for change in reader.changes(version):
            slot = (change.partition, freeze(change.key))
            if change.value is None:
                removals += 1
                accumulated.pop(slot, None)
            else:
                accumulated[slot] = freeze(change.value)
        expected = oracle[name, store][epoch]
        assert _frozen(list(reader.full_state(version))) == expected, f"epoch {epoch}"
        assert {(p, k, v) for (p, k), v in accumulated.items()} == expected, f"epoch {epoch}"
    assert any(oracle[name, store].values()), "the state is always empty"
    if name != "plain":
        assert removals > 0, "the watermark never removed a key"


def _wait_for_snapshots(root: Path) -> list[Path]:
    deadline = time.monotonic() + 20
    while True:
        snapshots = sorted((root / "state").glob("0/*/*.snapshot"))
        partitions = {p.parent.name for p in snapshots}
        if partitions == {"0", "1"} or time.monotonic() > deadline:
            return snapshots
        time.sleep(0.2)


@pytest.mark.parametrize("name", ["window", "dedup"])
def test_snapshots_rebuild_the_same_state(
    name: str,
    checkpoints: dict[str, Path],
    oracle: Oracle,
    tmp_path: Path,
) -> None:
    snapshots = _wait_for_snapshots(checkpoints[name])
    assert {p.parent.name for p in snapshots} == {"0", "1"}, "maintenance wrote no snapshot"
    # A copy without the deltas a snapshot covers: every version from the oldest
    # snapshot on can only be rebuilt through that snapshot.
    copy = tmp_path / "cp"
    shutil.copytree(checkpoints[name], copy)
    oldest = {p.parent.name: int(p.stem) for p in reversed(snapshots)}
    for partition, snapshot_version in oldest.items():
        for delta in (copy / "state" / "0" / partition).glob("*.delta"):
            if int(delta.stem) <= snapshot_version:
                delta.unlink()
    reader = HdfsStoreReader.open(Checkpoint(copy), 0)
    first = max(oldest.values())
    latest = Checkpoint(copy).latest_committed()
    assert latest is not None and first <= latest + 1
    for version in range(first, latest + 2):
        assert _frozen(list(reader.full_state(version))) == oracle[name, "default"][version - 1]
    with pytest.raises(MissingStateFile):
        list(reader.full_state(min(oldest.values()) - 1))
    with pytest.raises(MissingStateFile):
        list(reader.changes(min(oldest.values())))


def test_schemas_of_the_rich_aggregation(checkpoints: dict[str, Path]) -> None:
    key, value = Checkpoint(checkpoints["plain"]).store_schema(0)
    assert key.names == ("sh", "s", "dec", "b", "st", "arr")
    assert isinstance(key.fields[4].type, StructType)
    kinds = {type(f.type) for f in value.fields}
    assert {MapType, ArrayType, StructType, DecimalType, AtomicType} <= kinds
    dedup_key, dedup_value = Checkpoint(checkpoints["dedup"]).store_schema(0)
    assert len(dedup_key.fields) > 64  # a null bitset of two words
    assert [f.type for f in dedup_value.fields] == [AtomicType("null")]
