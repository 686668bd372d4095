"""The swap demo's three Spark queries.

``counts-v1`` (OLD) and ``counts-v2`` (NEW) read the subject ``orders`` aligned
and keep per user the number of orders so far (v2 also their total amount) in
``applyInPandasWithState``; each batch emits, per user it saw, the orders of
the batch and the running count, through the aligned sink into the subject
``counts``. v2's sink runs in shadow until the swap hands ``counts`` to it.
``counts-reader`` reads ``counts`` aligned, one batch per subject epoch, and
hands each batch's rows to the demo (its ``foreachBatch``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from epochstate.devtools.swap_demo.orders import ORDER_SCHEMA, ORDERS

FORMAT = "epochstate-kafka"
COUNTS = "counts"
OLD, NEW, READER = "counts-v1", "counts-v2", "counts-reader"
V1_SCHEMA = "user string, orders long, count long"
V2_SCHEMA = "user string, orders long, count long, amount long"
COUNT_SCHEMA = V2_SCHEMA  # what the reader parses: v1's rows have no amount (null)


@dataclass(frozen=True)
class Wiring:
    """Where the jobs find the broker and ZooKeeper, where their checkpoints go, how often they run."""

    bootstrap: str
    zookeeper: str
    checkpoints: Path
    trigger_seconds: float

    def checkpoint(self, job: str) -> str:
        return str(self.checkpoints / job)

    def aligned(self, reader: Any, topic: str, job: str) -> Any:
        """``reader`` (a DataStreamReader or DataStreamWriter) with the aligned connector's options."""
        return (
            reader.option("topic", topic)
            .option("bootstrap", self.bootstrap)
            .option("zookeeper", self.zookeeper)
            .option("job", job)
            .option("checkpointLocation", self.checkpoint(job))
        )


def count_orders(key: tuple[str], frames: Iterator[Any], state: Any) -> Iterator[Any]:
    """v1: a user's orders so far (its state ``count``); emits the batch's orders and the new count."""
    import pandas as pd  # type: ignore[import-untyped]

    (user,) = key
    (count,) = state.get if state.exists else (0,)
    orders = sum(len(frame) for frame in frames)
    state.update((count + orders,))
    yield pd.DataFrame({"user": [user], "orders": [orders], "count": [count + orders]})


def count_and_sum_orders(key: tuple[str], frames: Iterator[Any], state: Any) -> Iterator[Any]:
    """v2: as v1, and also the total amount of the user's orders (state ``count, amount``)."""
    import pandas as pd

    (user,) = key
    count, amount = state.get if state.exists else (0, 0)
    orders = 0
    for frame in frames:
        orders += len(frame)
        amount += int(frame["amount"].sum())
    state.update((count + orders, amount))
    yield pd.DataFrame({"user": [user], "orders": [orders], "count": [count + orders], "amount": [amount]})


def start_counts(spark: Any, wiring: Wiring, job: str) -> Any:
    """Job ``job`` (OLD or NEW): orders per user -> subject ``counts``; NEW's sink in shadow."""
    from pyspark.sql import functions as F
    from pyspark.sql.streaming.state import GroupStateTimeout

    orders = (
        wiring.aligned(spark.readStream.format(FORMAT), ORDERS, job)
        .load()
        .select(F.from_json(F.col("value").cast("string"), ORDER_SCHEMA).alias("o"))
        .select("o.*")
    )
    if job == OLD:
        count, schema, state = count_orders, V1_SCHEMA, "count long"
    else:
        count, schema, state = count_and_sum_orders, V2_SCHEMA, "count long, amount long"
    counted = orders.groupBy("user").applyInPandasWithState(
        count, schema, state, "append", GroupStateTimeout.NoTimeout
    )
    columns = [c.split()[0] for c in schema.split(", ")]
    return (
        wiring.aligned(
            counted.select(
                F.col("user").alias("key"),
                F.to_json(F.struct(*columns)).alias("value"),
            ).writeStream.format(FORMAT),
            COUNTS,
            job,
        )
        .option("shadow", str(job == NEW).lower())
        .outputMode("append")
        .queryName(job)
        .trigger(processingTime=f"{wiring.trigger_seconds} seconds")
        .start()
    )


def start_reader(spark: Any, wiring: Wiring, sink: Callable[[Any, int], None]) -> Any:
    """The downstream job: subject ``counts``, aligned, each batch's rows to ``sink``."""
    from pyspark.sql import functions as F

    rows = (
        wiring.aligned(spark.readStream.format(FORMAT), COUNTS, READER)
        .load()
        .select(F.from_json(F.col("value").cast("string"), COUNT_SCHEMA).alias("c"))
        .select("c.*")
    )
    return (
        rows.writeStream.foreachBatch(sink)
        .queryName(READER)
        .trigger(processingTime=f"{wiring.trigger_seconds} seconds")
        .option("checkpointLocation", wiring.checkpoint(READER))
        .start()
    )
