"""transformWithState state schema evolution across runs of one checkpoint (Avro
state encoding, RocksDB with changelog checkpointing), followed by a daemon live
across the changes and by one started afterwards, against Spark's reader at every
epoch of every variable.

Three runs of two batches each: the first has a value variable ``count`` of
``n bigint`` and a list variable ``events``; the second adds a field to ``count``
(``n, last``) and a new value variable ``seen``; the third removes ``count``'s
field ``n`` (``last`` alone) and the variable ``events``.

What Spark 4.3 does (found by running it): it accepts all four changes. Each run
writes operator metadata (``_metadata/v2/<first batch>``) and a state schema file
(``_stateSchema/default/<first batch>_<uuid>``) of its own, and ``count``'s value
schema gets a new schema id per change. Its reader reads each epoch with the
metadata and schema of the run that wrote it: ``count`` is ``struct<n>`` at epochs
0-1, ``struct<n, last>`` at 2-3, ``struct<last>`` at 4-5; a row written under an
older schema id and untouched since is resolved to the epoch's schema by field
name (user ``c``, last written in epoch 1, reads ``(n=1, last=None)`` at epoch 2;
written in epoch 3 as ``(2, 't3')``, it reads ``(last='t3')`` at epoch 4). A
variable not in the epoch's metadata is refused (``seen`` before epoch 2,
``events`` from epoch 4): ``STDS_INVALID_OPTION_VALUE``.

The daemon follows all of it. Each epoch is read with the operator metadata of
its run; a store whose schemas change is rewritten whole at that epoch, every row
of an older schema id resolved by field name as Spark does; a variable outside
the runs that declare it is refused (``STORE_NOT_FOUND``), live and started
afterwards.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from epochstate.client import EpochDamaged, EpochStateClient, StoreNotFound
from epochstate.core.sparktypes import type_to_simple_string
from tests.fixtures.daemon import DaemonProcess
from tests.fixtures.oracle import StoreOracle, assert_store_equals_oracle, canon, plain
from tests.fixtures.streams import FileStream
from tests.fixtures.tws_oracle import LIST, VALUE, spark_variables, tws_session

SCHEMA = "user string, v long, tag string"
JOB = "tws-evolve"
RUNS, BATCHES_PER_RUN = 3, 2
EPOCHS = list(range(RUNS * BATCHES_PER_RUN))
# Variable -> (kind, the epochs whose run declares it).
VARIABLES = {"count": (VALUE, EPOCHS), "events": (LIST, EPOCHS[:4]), "seen": (VALUE, EPOCHS[2:])}
# count's value schema per run, as Spark's reader shows it.
COUNT_VALUE = {0: "struct<n:bigint>", 2: "struct<n:bigint,last:string>", 4: "struct<last:string>"}


def _processor(run: int) -> Any:
    from pyspark.sql.streaming.stateful_processor import StatefulProcessor

    class Evolving(StatefulProcessor):
        """Run 0: count (n), events. Run 1: count (n, last), events, seen. Run 2: count (last), seen."""

        def init(self, handle: Any) -> None:
            self.count = handle.getValueState("count", ["n long", "n long, last string", "last string"][run])
            if run < 2:
                self.events = handle.getListState("events", "v long")
            if run > 0:
                self.seen = handle.getValueState("seen", "tag string")

        def handleInputRows(self, key: Any, rows: Iterator[Any], timerValues: Any) -> Iterator[Any]:
            import pandas as pd  # type: ignore[import-untyped]

            n = self.count.get()[0] if run < 2 and self.count.exists() else 0
            for frame in rows:
                for row in frame.itertuples():
                    n += 1
                    self.count.update([(n,), (n, row.tag), (row.tag,)][run])
                    if run < 2:
                        self.events.appendValue((int(row.v),))
                    if run > 0:
                        self.seen.update((row.tag,))
            yield pd.DataFrame({"user": [key[0]], "n": [n]})

        def close(self) -> None:
            pass

    return Evolving()


def _query(run: int) -> Callable[[Any], Any]:
    def build(frame: Any) -> Any:
        return frame.groupBy("user").transformWithStateInPandas(
            _processor(run), "user string, n long", "update", "None"
        )

    return build


def rows(batch: int) -> list[dict[str, Any]]:
    """Odd batches touch a, b and c, even ones a and b: c's rows outlive a schema change."""
    users = "abc"[: 2 + batch % 2]
    return [{"user": u, "v": batch * 10 + i, "tag": f"t{batch}"} for i, u in enumerate(users)]


@dataclass
class Evolution:
    checkpoint: Path
    committed: list[int]
    live: DaemonProcess
    oracles: dict[str, StoreOracle]  # variable -> Spark's reader at the epochs it is declared
    refused: dict[tuple[str, int], str]  # (variable, epoch) -> why Spark's reader refused


def _spark_oracle(spark: Any, checkpoint: Path, name: str, kind: str, epochs: list[int]) -> StoreOracle:
    # One reading per epoch: the value schema differs between runs.
    states = {}
    for epoch in epochs:
        (oracle,) = spark_variables(spark, {JOB: checkpoint}, {JOB: [epoch]}, {name: kind})[JOB].values()
        states[epoch] = oracle.states[epoch]
    return StoreOracle(0, name, oracle.key_type, oracle.value_type, states)


@pytest.fixture(scope="module")
def evolution(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Evolution]:
    base = tmp_path_factory.mktemp("life-tws")
    checkpoint = base / "cp"
    session = tws_session(spark, True, "avro")
    stream = FileStream(session, base / "in", checkpoint, _query(0), SCHEMA, "update").start()
    stream.stop()  # its metadata is written: the daemon follows from before the first commit
    live = DaemonProcess(base / "live", {JOB: str(checkpoint)}).start()
    try:
        for run in range(RUNS):
            stream.build = _query(run)
            stream.start(fresh=False)
            try:
                for _ in range(BATCHES_PER_RUN):
                    stream.feed(rows(stream.files))
            finally:
                stream.stop()
        committed = stream.committed()
        live.wait_for_epoch(JOB, committed[-1])
        oracles = {
            name: _spark_oracle(spark, checkpoint, name, kind, epochs)
            for name, (kind, epochs) in VARIABLES.items()
        }
        refused = {}
        for name, (_, epochs) in VARIABLES.items():
            for epoch in sorted(set(EPOCHS) - set(epochs)):
                reader = spark.read.format("statestore").option("batchId", epoch).option("stateVarName", name)
                with pytest.raises(Exception) as error:
                    reader.load(str(checkpoint)).collect()
                refused[(name, epoch)] = str(error.value)
        yield Evolution(checkpoint, committed, live, oracles, refused)
    finally:
        live.stop()


def test_spark_accepts_value_fields_and_variables_added_and_removed(evolution: Evolution, spark: Any) -> None:
    assert evolution.committed == EPOCHS
    assert all("STDS_INVALID_OPTION_VALUE" in why for why in evolution.refused.values())
    assert set(evolution.refused) == {("seen", 0), ("seen", 1), ("events", 4), ("events", 5)}
    for epoch in EPOCHS:  # each epoch read with its own run's schema
        frame = spark.read.format("statestore").option("batchId", epoch).option("stateVarName", "count")
        value = frame.load(str(evolution.checkpoint)).schema["value"].dataType.simpleString()
        assert value == COUNT_VALUE[epoch - epoch % 2]
    count = evolution.oracles["count"].states
    c = canon({"user": "c"})
    # c, untouched in epochs 2 and 4, read with the newer schema (fields resolved by name).
    assert count[2][c][1] == {"n": 1, "last": None}
    assert count[4][c][1] == {"last": "t3"}


def _schemas_at(client: EpochStateClient, epoch: int) -> str:
    return type_to_simple_string(client.describe(JOB).store(0, "count").at(epoch).value)


def test_followed_live_serves_each_epoch_with_its_schema_and_the_first_run_as_spark(
    evolution: Evolution,
) -> None:
    with evolution.live.client() as client:
        for epoch in EPOCHS:
            assert _schemas_at(client, epoch) == COUNT_VALUE[epoch - epoch % 2], epoch
        for name in ("count", "events"):  # before any change
            assert_store_equals_oracle(client, JOB, evolution.oracles[name], EPOCHS[:BATCHES_PER_RUN])
        # Keys written in the epoch read, with the schema of that epoch.
        for epoch in EPOCHS[BATCHES_PER_RUN:]:
            served = {canon(lk.key): plain(lk.value) for lk in client.scan(JOB, epoch=epoch, store="count")}
            for key, (_, value, _) in evolution.oracles["count"].states[epoch].items():
                if epoch % 2 or key != canon({"user": "c"}):
                    assert served[key] == value, (epoch, key)


def test_followed_live_resolves_untouched_values_to_the_new_schema(evolution: Evolution) -> None:
    with evolution.live.client() as client:
        for name in ("count", "events", "seen"):
            assert_store_equals_oracle(client, JOB, evolution.oracles[name])


def test_followed_live_refuses_variables_where_spark_does(evolution: Evolution) -> None:
    with evolution.live.client() as client:
        for name, epoch in evolution.refused:
            with pytest.raises(StoreNotFound):
                client.get(JOB, {"user": "a"}, epoch=epoch, store=name)


def test_started_afterwards_serves_or_refuses_every_epoch(
    evolution: Evolution, daemon_factory: Callable[..., DaemonProcess]
) -> None:
    late = daemon_factory({JOB: str(evolution.checkpoint)}, name="late")
    with late.client() as client:
        _wait_for_settled(client)
        refusals = {}
        for epoch in EPOCHS:
            for name, oracle in evolution.oracles.items():
                if epoch not in oracle.states:
                    continue
                try:
                    assert_store_equals_oracle(client, JOB, oracle, [epoch])
                except EpochDamaged as refused:
                    assert refused.reason == "EPOCH_UNAVAILABLE", (name, epoch)
                    refusals[(name, epoch)] = str(refused)
            for name, epoch in evolution.refused:
                with pytest.raises(StoreNotFound):
                    client.get(JOB, {"user": "a"}, epoch=epoch, store=name)
        # Every run's rows and schemas are readable, so none is refused.
        assert refusals == {}


def _wait_for_settled(client: EpochStateClient) -> None:
    """Until the daemon has ingested the newest epoch: a problem recorded meanwhile may
    be retried away. The job is described while it ingests: later reads are of shapes
    that description does not know, which the client learns from the answers' shape
    and describes again. Fails with the problems when it does not get there."""
    import time

    deadline = time.monotonic() + 60
    problems: dict[int, str] = {}
    while time.monotonic() < deadline:
        latest = {j.job: j.latest_epoch for j in client.jobs()}.get(JOB, -1)
        if latest >= EPOCHS[-1]:
            return
        problems.update({p.epoch: p.reason for p in client.describe(JOB, refresh=True).problems})
        time.sleep(0.2)
    raise AssertionError(f"the daemon started afterwards did not ingest every epoch; problems: {problems}")
