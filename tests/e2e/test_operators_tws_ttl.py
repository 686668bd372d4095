"""transformWithStateInPandas with state TTL (processing time), on the RocksDB provider
with changelog checkpointing and UnsafeRow rows, and without it with Avro rows,
followed by the real daemon: every variable equals Spark's reader at every epoch,
expired entries included, and Spark's TTL index families stay hidden as they are
from Spark's reader. One variable holds every data type, in both encodings."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import date, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures.daemon import DaemonProcess
from tests.fixtures.streams import FileStream
from tests.fixtures.tws_oracle import (
    LIST,
    MAP,
    RUNS,
    TIMER,
    TIMERS,
    VALUE,
    assert_variables_served,
    run_batches,
    spark_variables,
    tws_session,
)

SCHEMA = "user string, v long, tag string"
TTL_MS = 10_000
VARIABLES = {"count": VALUE, "events": LIST, "tags": MAP, "kinds": VALUE, TIMERS: TIMER}
# Every type a state row can hold (Avro encodes each its own way); the row of an
# even event holds values, of an odd one nulls.
KINDS = (
    "i int, f float, b boolean, bin binary, d decimal(10,2), big decimal(30,5), dt date, ts timestamp, "
    "xs array<bigint>, rows array<struct<x: int, y: string>>, m map<string, bigint>, s string"
)


def kinds(v: int) -> tuple[Any, ...]:
    if v % 2:
        return (None,) * 12
    return (
        v,
        1.5,
        True,
        bytes([0, v]),
        Decimal(-v) / 100,
        Decimal("123456789012345678901.12345") * v,
        date(2024, 2, 29),
        datetime(2024, 1, 1, 12, 0, v, 123456),
        [1, -v, 3],
        [(v, "one"), (2, None)],
        {"k": v, "j": -7},
        "héllo",
    )


# Job -> (changelog checkpointing, state encoding), as in test_operators_tws.
# Batch 1 touches a again (a new expiry for its value, a list element of its own);
# the pause before batch 2 outlasts every expiry set so far, so batch 2 removes
# them all; batch 3 follows at once. The jobs run side by side, so that their
# pauses overlap.
BATCHES = [
    [("a", "x"), ("b", "y"), ("a", "y")],
    [("a", "z"), ("c", "x")],
    [("d", "x")],
    [("e", "y"), ("d", "z")],
]


def _processor() -> Any:
    from pyspark.sql.streaming.stateful_processor import StatefulProcessor

    class Expiring(StatefulProcessor):
        """Per user: a count, the events, per tag a count and the last event's
        :func:`kinds`, each with a TTL; a processing-time timer one TTL after each
        batch that saw the user."""

        def init(self, handle: Any) -> None:
            self.handle = handle
            self.count = handle.getValueState("count", "n long", TTL_MS)
            self.events = handle.getListState("events", "v long, tag string", TTL_MS)
            self.tags = handle.getMapState("tags", "tag string", "n long", TTL_MS)
            self.kinds = handle.getValueState("kinds", KINDS, TTL_MS)

        def handleInputRows(self, key: Any, rows: Iterator[Any], timerValues: Any) -> Iterator[Any]:
            import pandas as pd  # type: ignore[import-untyped]

            n = self.count.get()[0] if self.count.exists() else 0
            for frame in rows:
                for row in frame.itertuples():
                    n += 1
                    self.events.appendValue((int(row.v), row.tag))
                    seen = self.tags.getValue((row.tag,)) if self.tags.containsKey((row.tag,)) else (0,)
                    self.tags.updateValue((row.tag,), (seen[0] + 1,))
                    self.kinds.update(kinds(int(row.v)))
            self.count.update((n,))
            self.handle.registerTimer(timerValues.getCurrentProcessingTimeInMs() + TTL_MS)
            yield pd.DataFrame({"user": [key[0]], "n": [n]})

        def handleExpiredTimer(self, key: Any, timerValues: Any, expiredTimerInfo: Any) -> Iterator[Any]:
            import pandas as pd

            yield pd.DataFrame({"user": [key[0]], "n": [-1]})

        def close(self) -> None:
            pass

    return Expiring()


def expiring(frame: Any) -> Any:
    return frame.groupBy("user").transformWithStateInPandas(
        _processor(), "user string, n long", "update", "ProcessingTime"
    )


def rows(batch: int) -> list[dict[str, Any]]:
    return [{"user": u, "v": batch * 10 + i, "tag": t} for i, (u, t) in enumerate(BATCHES[batch])]


def _pause_before_expiry(batch: int) -> None:
    if batch == 2:
        time.sleep(TTL_MS / 1000 + 1)


@pytest.mark.timeout(900)
def test_state_variables_with_ttl_equal_spark_reader(
    spark: Any, tmp_path: Path, daemon_factory: Callable[..., DaemonProcess]
) -> None:
    checkpoints = {job: tmp_path / job / "cp" for job in RUNS}
    streams = {}
    for job, (changelog, encoding) in RUNS.items():
        session = tws_session(spark, changelog, encoding)
        streams[job] = FileStream(
            session, tmp_path / job / "in", checkpoints[job], expiring, SCHEMA, "update"
        )
    with ThreadPoolExecutor(len(streams)) as pool:
        runs = [
            pool.submit(
                run_batches, stream, [rows(b) for b in range(len(BATCHES))], before=_pause_before_expiry
            )
            for stream in streams.values()
        ]
        for run in runs:
            run.result()
    daemon = daemon_factory({job: str(cp) for job, cp in checkpoints.items()})
    epochs = {job: stream.committed() for job, stream in streams.items()}
    assert all(e == list(range(len(BATCHES))) for e in epochs.values())
    for job in RUNS:
        daemon.wait_for_epoch(job, len(BATCHES) - 1)
    oracles = spark_variables(spark, checkpoints, epochs, VARIABLES)
    with daemon.client() as client:
        for job in RUNS:
            for store, oracle in oracles[job].items():
                assert oracle.states[1], f"{job}: {store} is empty at epoch 1"
                expired = set(oracle.states[1]) & set(oracle.states[2])
                assert not expired, f"{job}: {store} kept {expired} past its TTL"
                if store != TIMERS:
                    # Every value carries its expiry, as Spark's reader shows it.
                    assert "ttlExpirationMs:bigint" in oracle.value_type, oracle.value_type
            assert_variables_served(client, job, "transformWithStateInPandasExec", oracles[job], VARIABLES)
