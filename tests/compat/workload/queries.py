"""The fixed workload: four stateful queries over one stream of events, on every state
store set-up the release has, a few batches each.

Every query reads the same JSON file source (one file per batch) and keeps state
that is inserted, updated and removed within three batches: the second batch moves
the 10 s watermark past the first one's events, so in the third one windows,
duplicates and join rows are evicted and transformWithState's event-time timers
fire and clear their keys. Without no-data batches each batch is one epoch.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

PROVIDER = "spark.sql.streaming.stateStore.providerClass"
CHANGELOG = "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled"
FORMAT_VERSION = "spark.sql.streaming.stateStore.checkpointFormatVersion"
ROCKSDB = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"

SCHEMA = "user string, v long, tag string, ts timestamp"
BATCHES = 3
# Batches a newer release runs on a checkpoint the workload made (see ``rows``).
CONTINUED_BATCHES = 2


@dataclass(frozen=True)
class StoreSetup:
    """A state store provider configuration (settings a query starts with)."""

    name: str
    conf: dict[str, str]
    rocksdb: bool = True
    format_v2: bool = False


SETUPS = (
    StoreSetup("hdfs", {}, rocksdb=False),
    StoreSetup("rocksdb-snapshots", {PROVIDER: ROCKSDB, CHANGELOG: "false"}),
    StoreSetup("rocksdb-changelog", {PROVIDER: ROCKSDB, CHANGELOG: "true"}),
    StoreSetup(
        "rocksdb-v2-snapshots", {PROVIDER: ROCKSDB, CHANGELOG: "false", FORMAT_VERSION: "2"}, format_v2=True
    ),
    StoreSetup(
        "rocksdb-v2-changelog", {PROVIDER: ROCKSDB, CHANGELOG: "true", FORMAT_VERSION: "2"}, format_v2=True
    ),
)
# Every setting any set-up changes: unset before a set-up applies its own.
SETTINGS = (PROVIDER, CHANGELOG, FORMAT_VERSION)


def at(second: int) -> str:
    return f"2024-01-01T00:{second // 60:02d}:{second % 60:02d}Z"


def rows(batch: int) -> list[dict[str, Any]]:
    """Batch 1 repeats keys (and one whole event) of batch 0, drops a map entry and
    moves the watermark to 14 s; batch 2 resets a user, and batch 0's windows,
    duplicates, join rows and timers fall behind the watermark in it (removals)."""
    events = [
        [("a", "x", 0), ("b", "y", 1), ("a", "y", 2), ("a", "x", 2)],
        [("a", "drop", 4), ("b", "y", 1), ("c", "x", 13), ("b", "y", 24)],
        [("c", "reset", 30), ("a", "z", 31), ("d", "x", 32)],
        # Only for a checkpoint continued by a newer release (``tests/compat/continuation.py``).
        [("a", "x", 44), ("e", "y", 45), ("d", "x", 32)],
        [("b", "z", 58), ("a", "drop", 59)],
    ][batch]
    return [{"user": u, "v": batch * 10 + i, "tag": t, "ts": at(s)} for i, (u, t, s) in enumerate(events)]


def aggregation(frame: Any) -> Any:
    from pyspark.sql import functions as F

    return (
        frame.withWatermark("ts", "10 seconds")
        .groupBy(F.window("ts", "10 seconds"), "user")
        .agg(F.count("*").alias("n"), F.sum("v").alias("total"), F.max("tag").alias("last_tag"))
    )


def dedup(frame: Any) -> Any:
    return frame.withWatermark("ts", "10 seconds").dropDuplicates(["user", "tag", "ts"])


def join(frame: Any) -> Any:
    from pyspark.sql import functions as F

    left = frame.select("user", F.col("v").alias("lv"), F.col("ts").alias("lts")).withWatermark(
        "lts", "10 seconds"
    )
    right = frame.select(F.col("user").alias("ruser"), "tag", F.col("ts").alias("rts")).withWatermark(
        "rts", "10 seconds"
    )
    return left.join(
        right,
        F.expr("user = ruser AND rts >= lts - INTERVAL 5 SECONDS AND rts <= lts + INTERVAL 5 SECONDS"),
    )


def _processor() -> Any:
    from pyspark.sql.streaming.stateful_processor import StatefulProcessor

    class Tracked(StatefulProcessor):
        """Per user: a count (value state), the events (list state), a count per tag
        (map state; ``reset`` clears list and map, ``drop`` removes its entry), and an
        event-time timer 5 s after the newest event that clears everything."""

        def init(self, handle: Any) -> None:
            self.handle = handle
            self.count = handle.getValueState("count", "n long")
            self.events = handle.getListState("events", "v long, tag string")
            self.tags = handle.getMapState("tags", "tag string", "n long")

        def handleInputRows(self, key: Any, rows: Iterator[Any], timerValues: Any) -> Iterator[Any]:
            import pandas as pd  # type: ignore[import-untyped]

            n = self.count.get()[0] if self.count.exists() else 0
            newest = 0
            for frame in rows:
                for row in frame.itertuples():
                    n += 1
                    newest = max(newest, int(row.ts.timestamp() * 1000))
                    if row.tag == "reset":
                        self.events.clear()
                        self.tags.clear()
                        continue
                    self.events.appendValue((int(row.v), row.tag))
                    seen = self.tags.getValue((row.tag,))[0] if self.tags.containsKey((row.tag,)) else 0
                    self.tags.updateValue((row.tag,), (seen + 1,))
                    if row.tag == "drop":
                        self.tags.removeKey((row.tag,))
            self.count.update((n,))
            self.handle.registerTimer(newest + 5000)
            yield pd.DataFrame({"user": [key[0]], "n": [n]})

        def handleExpiredTimer(self, key: Any, timerValues: Any, expiredTimerInfo: Any) -> Iterator[Any]:
            import pandas as pd

            self.count.clear()
            self.events.clear()
            self.tags.clear()
            yield pd.DataFrame({"user": [key[0]], "n": [-1]})

        def close(self) -> None:
            pass

    return Tracked()


def transform_with_state(frame: Any) -> Any:
    return (
        frame.withWatermark("ts", "10 seconds")
        .groupBy("user")
        .transformWithStateInPandas(_processor(), "user string, n long", "update", "EventTime")
    )


@dataclass(frozen=True)
class Query:
    name: str
    build: Callable[[Any], Any]
    output_mode: str
    rocksdb_only: bool = False
    # The stores of its one operator (id 0).
    stores: tuple[str, ...] = ("default",)
    # transformWithState variables: name -> kind ("value", "list", "map", "timers").
    variables: tuple[tuple[str, str], ...] = ()


TIMERS = "$timers"
QUERIES = (
    Query("aggregation", aggregation, "update"),
    Query("dedup", dedup, "append"),
    Query(
        "join",
        join,
        "append",
        stores=tuple(
            f"{side}-{kind}"
            for side in ("left", "right")
            for kind in ("keyToNumValues", "keyWithIndexToValue")
        ),
    ),
    Query(
        "tws",
        transform_with_state,
        "update",
        rocksdb_only=True,
        variables=(("count", "value"), ("events", "list"), ("tags", "map"), (TIMERS, "timers")),
    ),
)
