"""transformWithStateInPandas on the RocksDB provider (changelog checkpointing on and
off, UnsafeRow and Avro state encodings), followed by the real daemon: every state
variable, and the timers, at every committed epoch equal Spark's own reader
(``statestore`` with ``stateVarName`` / ``readRegisteredTimers``).

The query is the compatibility workload's (``tests/compat/workload``): that copy
runs in every Spark release's own interpreter, so it is the one kept."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.compat.workload.queries import SCHEMA
from tests.compat.workload.queries import transform_with_state as tagged
from tests.fixtures.daemon import DaemonProcess
from tests.fixtures.oracle import assert_store_equals_oracle
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
    scanned_by_prefix,
    spark_variables,
    tws_session,
)


def at(second: int) -> str:
    return f"2024-01-01T00:{second // 60:02d}:{second % 60:02d}Z"


BATCHES = 4


def tagged_rows(batch: int) -> list[dict[str, Any]]:
    # Batch 1 drops a map entry, batch 2 resets a user's list and map and moves the
    # watermark past the timers of batches 0 and 1, which fire (and clear their
    # users' state) in batch 3.
    rows = [
        [("a", "x", 0), ("b", "y", 1), ("a", "y", 2)],
        [("a", "drop", 12), ("c", "x", 13), ("b", "y", 14)],
        [("c", "reset", 30), ("a", "z", 31)],
        [("d", "x", 32)],
    ][batch]
    return [{"user": u, "v": batch * 10 + i, "tag": t, "ts": at(s)} for i, (u, t, s) in enumerate(rows)]


VARIABLES = {"count": VALUE, "events": LIST, "tags": MAP, TIMERS: TIMER}
# Job -> (changelog checkpointing, state encoding): each checkpointing mode and each
# encoding once (a query costs minutes on a loaded machine).


@pytest.mark.timeout(900)
def test_transform_with_state_variables_equal_spark_reader(
    spark: Any, tmp_path: Path, daemon_factory: Callable[..., DaemonProcess]
) -> None:
    """Two queries (changelog checkpointing on with UnsafeRow rows, off with Avro
    rows), without no-data batches: the last batch fires the first batches' timers."""
    checkpoints = {job: tmp_path / job / "cp" for job in RUNS}
    streams = {}
    for job, (changelog, encoding) in RUNS.items():
        session = tws_session(spark, changelog, encoding)
        streams[job] = FileStream(session, tmp_path / job / "in", checkpoints[job], tagged, SCHEMA, "update")
    # One after the other: Python workers of concurrent queries time out connecting
    # back on a loaded machine. The daemon then follows both from their first epoch.
    for stream in streams.values():
        run_batches(stream, [tagged_rows(b) for b in range(BATCHES)])
    daemon = daemon_factory({job: str(cp) for job, cp in checkpoints.items()})
    epochs = {job: stream.committed() for job, stream in streams.items()}
    assert all(e == list(range(BATCHES)) for e in epochs.values())
    for job in RUNS:
        daemon.wait_for_epoch(job, BATCHES - 1)
    oracles = spark_variables(spark, checkpoints, epochs, VARIABLES)
    (metadata,) = spark.read.format("state-metadata").load(str(checkpoints["snapshots-avro"])).collect()
    declared = {
        TIMERS if v["stateVariableType"] == "TimerState" else v["stateName"]: v["stateVariableType"]
        for v in json.loads(metadata.operatorProperties)["stateVariables"]
    }
    assert declared == {
        "count": "ValueState",
        "events": "ListState",
        "tags": "MapState",
        TIMERS: "TimerState",
    }
    with daemon.client() as client:
        for job in RUNS:
            assert all(o.removes() for o in oracles[job].values()), f"{job}: every variable should lose keys"
            assert_variables_served(client, job, metadata.operatorName, oracles[job], VARIABLES)
            # One user's map entries and timers, by a grouping-key prefix.
            for store in ("tags", TIMERS):
                oracle = oracles[job][store]
                for epoch in epochs[job]:
                    expected = {k: v for k, v in oracle.states[epoch].items() if v[0]["key"] == {"user": "a"}}
                    scanned = scanned_by_prefix(client, job, store, {"user": "a"}, epoch)
                    assert scanned == expected, f"{job}: {store} of a at {epoch}"
    late = daemon_factory(
        {"changelog": str(checkpoints["changelog"])}, name="late", extra_args=["--retention-epochs", "2"]
    )
    late.wait_for_epoch("changelog", BATCHES - 1)
    with late.client() as client:
        for oracle in oracles["changelog"].values():
            assert_store_equals_oracle(client, "changelog", oracle, epochs["changelog"][-2:])
