"""transformWithState through the Scala/Java API (``transformWithStateExec``): a Java
StatefulProcessor with value, list and map state, a value state with a TTL and a
processing-time timer, run as a local-mode Spark program on the RocksDB provider
with changelog checkpointing, once with UnsafeRow and once with Avro state rows.
The real daemon follows both checkpoints; every variable and the timers equal Spark's
reader at every epoch."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures.daemon import DaemonProcess
from tests.fixtures.java_program import java_tws_classes, run_java_tws
from tests.fixtures.tws_oracle import (
    LIST,
    MAP,
    TIMER,
    TIMERS,
    VALUE,
    assert_variables_served,
    scanned_by_prefix,
    spark_variables,
)

__all__ = ["java_tws_classes"]  # the compiled program, a fixture

ENCODINGS = ["unsaferow", "avro"]
BATCHES = 4  # TwsMain.BATCHES
VARIABLES = {"count": VALUE, "events": LIST, "tags": MAP, "last": VALUE, TIMERS: TIMER}


@pytest.mark.timeout(900)
def test_java_transform_with_state_equals_spark_reader(
    spark: Any, tmp_path: Path, java_tws_classes: Path, daemon_factory: Callable[..., DaemonProcess]
) -> None:
    root = tmp_path / "java"
    run_java_tws(java_tws_classes, root, ENCODINGS, tmp_path / "java.log")
    checkpoints = {f"java-{e}": root / e / "cp" for e in ENCODINGS}
    daemon = daemon_factory({job: str(cp) for job, cp in checkpoints.items()})
    epochs = {
        job: sorted(int(p.name) for p in (cp / "commits").iterdir() if p.name.isdigit())
        for job, cp in checkpoints.items()
    }
    assert all(e == list(range(BATCHES)) for e in epochs.values())
    for job in checkpoints:
        daemon.wait_for_epoch(job, BATCHES - 1)
    oracles = spark_variables(spark, checkpoints, epochs, VARIABLES)
    (metadata,) = spark.read.format("state-metadata").load(str(checkpoints["java-avro"])).collect()
    assert metadata.operatorName == "transformWithStateExec"
    ttl = {v["stateName"]: v["ttlEnabled"] for v in json.loads(metadata.operatorProperties)["stateVariables"]}
    assert ttl["last"] and not ttl["count"]
    with daemon.client() as client:
        for job in checkpoints:
            for store in ("count", "events", "tags", TIMERS):
                assert oracles[job][store].removes(), f"{job}: {store} should lose keys"
            assert_variables_served(client, job, metadata.operatorName, oracles[job], VARIABLES)
            oracle = oracles[job]["tags"]
            for epoch in epochs[job]:
                expected = {k: v for k, v in oracle.states[epoch].items() if v[0]["key"] == {"value": "a"}}
                assert scanned_by_prefix(client, job, "tags", {"value": "a"}, epoch) == expected
