"""Spark's own state reader (``format("statestore")``) as the oracle for the readers."""

from __future__ import annotations

import functools
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from epochstate.daemon.sources.changes import StateChange
from epochstate.daemon.sources.checkpoint.checkpoint import Checkpoint
from epochstate.daemon.sources.readers import StoreReader
from tests.sources.sparkvalues import freeze, from_spark

Entry = tuple[int, Any, Any]  # (partition, frozen key, frozen value)


def spark_state(
    spark: Any, root: Path, epochs: Iterable[int], store: str = "default", operator_id: int = 0
) -> dict[int, set[Entry]]:
    """Spark's state reader at each epoch (after the epoch ran), all epochs in one job."""
    from pyspark.sql import DataFrame
    from pyspark.sql import functions as F

    epochs = list(epochs)
    key_schema, value_schema = Checkpoint(root).store_schema(operator_id, store)
    frames = [
        spark.read.format("statestore")
        .option("batchId", epoch)
        .option("operatorId", operator_id)
        .option("storeName", store)
        .load(str(root))
        .withColumn("_epoch", F.lit(epoch))
        for epoch in epochs
    ]
    result: dict[int, set[Entry]] = {epoch: set() for epoch in epochs}
    for row in functools.reduce(DataFrame.unionByName, frames).collect():
        entry = (
            row["partition_id"],
            freeze(from_spark(row["key"], key_schema)),
            freeze(from_spark(row["value"], value_schema)),
        )
        assert entry not in result[row["_epoch"]]
        result[row["_epoch"]].add(entry)
    return result


def frozen(changes: Iterable[StateChange]) -> set[Entry]:
    """The state rows as oracle entries; fails if a key occurs twice in a partition."""
    rows = list(changes)
    entries = {(c.partition, freeze(c.key), freeze(c.value)) for c in rows}
    assert len(entries) == len(rows), "a key appears twice"
    assert len({(p, k) for p, k, _ in entries}) == len(rows), "a key appears twice"
    return entries


def assert_matches_oracle(reader: StoreReader, epochs: list[int], expected: dict[int, set[Entry]]) -> int:
    """For each epoch (store version epoch + 1): the full state, and the changes
    replayed from the first epoch, both equal the oracle. Returns the removals seen."""
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
        assert frozen(reader.full_state(version)) == expected[epoch], f"epoch {epoch}"
        assert {(p, k, v) for (p, k), v in accumulated.items()} == expected[epoch], f"epoch {epoch}"
    return removals
