"""State checkpoint format version 2 through the real daemon: a batch whose state
stores committed and whose sink then failed leaves its files (``<v>_<id>``) beside
the re-run's under another unique id; the daemon serves the attempt the commit log
names, as ``spark.read.format("statestore")`` does, for every store of an
aggregation and of a stream-stream join (four stores, so four ids per partition)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures.daemon import DaemonProcess
from tests.fixtures.oracle import assert_store_equals_oracle, spark_store
from tests.fixtures.streams import CHECKPOINT_FORMAT, FORMAT2_PROVIDERS, FailingSink, FileStream, Provider
from tests.fixtures.tws_oracle import assert_variables_served, run_batches, spark_variables, tws_session

pytestmark = pytest.mark.spark

SCHEMA = "k long, v long"


def noisy_counts(frame: Any) -> Any:
    from pyspark.sql import functions as F

    # A random value in the state: a failed attempt's state differs from the re-run's.
    return frame.withColumn("noise", F.rand()).groupBy("k").agg(F.count("*").alias("n"), F.max("noise"))


def noisy_join(frame: Any) -> Any:
    from pyspark.sql import functions as F

    left = frame.select("k", F.col("v").alias("lv"))
    right = frame.select(F.col("k").alias("rk"), (F.col("v") + F.rand()).alias("rv"))
    return left.join(right, F.expr("k = rk"))


QUERIES: dict[str, tuple[Callable[[Any], Any], str]] = {
    "aggregation": (noisy_counts, "update"),
    "join": (noisy_join, "append"),
}


def rows(batch: int) -> list[dict[str, Any]]:
    return [{"k": (batch + i) % 5, "v": batch * 10 + i} for i in range(4)]


def _unique_ids(checkpoint: Path, version: int) -> dict[Path, set[str]]:
    """Per store directory: the unique ids of ``version``'s changelogs or zips."""
    found: dict[Path, set[str]] = {}
    for path in (checkpoint / "state").glob(f"**/{version}_*"):
        if path.suffix in (".changelog", ".zip"):
            found.setdefault(path.parent, set()).add(path.name.split("_", 1)[1].rsplit(".", 1)[0])
    return found


@pytest.mark.parametrize("provider", FORMAT2_PROVIDERS, ids=str)
@pytest.mark.parametrize("query", sorted(QUERIES))
def test_a_failed_attempts_files_are_never_served(
    spark: Any, tmp_path: Path, daemon_factory: Callable[..., DaemonProcess], query: str, provider: Provider
) -> None:
    build, mode = QUERIES[query]
    checkpoint = tmp_path / "cp"
    sink = FailingSink()
    session = provider.session(spark, no_data_batches=False)
    stream = FileStream(session, tmp_path / "in", checkpoint, build, SCHEMA, mode, sink=sink).start()
    daemon = daemon_factory({query: str(checkpoint)}, wait=False)
    try:
        for batch in range(2):
            stream.feed(rows(batch))
        sink.armed = True
        with pytest.raises(Exception, match="injected failure"):
            stream.feed(rows(2))
        stream.stop()
        (rerun,) = sink.failed()
        assert not (checkpoint / "commits" / str(rerun)).exists()
        failed = _unique_ids(checkpoint, rerun + 1)
        assert failed, "the failed attempt wrote no state files"
        stream.start(fresh=False)
        stream.query.processAllAvailable()  # re-runs the failed epoch
        stream.feed(rows(3))
    finally:
        stream.stop()
    committed = stream.committed()
    assert committed == [0, 1, 2, 3]
    # Both attempts' files are there, under two ids per store and partition.
    both = _unique_ids(checkpoint, rerun + 1)
    assert set(both) == set(failed)
    assert all(len(ids) == 2 and failed[d] < ids for d, ids in both.items())
    daemon.wait_for_epoch(query, committed[-1])

    metadata = session.read.format("state-metadata").load(str(checkpoint)).collect()
    assert len(metadata) == (4 if query == "join" else 1)
    with daemon.client() as client:
        for r in metadata:
            oracle = spark_store(
                session, checkpoint, committed, operator_id=r.operatorId, store=r.stateStoreName
            )
            assert oracle.keys(), f"store {r.stateStoreName} is empty"
            assert_store_equals_oracle(client, query, oracle)


@pytest.mark.timeout(900)
def test_transform_with_state_in_format_2_equals_spark_reader(
    spark: Any, tmp_path: Path, daemon_factory: Callable[..., DaemonProcess]
) -> None:
    """transformWithStateInPandas (one physical store with every variable, so one id
    per partition), changelog checkpointing on: every variable and the timers."""
    from tests.compat.workload.queries import SCHEMA as TWS_SCHEMA
    from tests.compat.workload.queries import transform_with_state as tagged
    from tests.e2e.test_operators_tws import BATCHES, VARIABLES, tagged_rows

    job, checkpoint = "tws", tmp_path / "cp"
    session = tws_session(spark, True, "unsaferow")
    session.conf.set(CHECKPOINT_FORMAT, "2")
    stream = FileStream(session, tmp_path / "in", checkpoint, tagged, TWS_SCHEMA, "update")
    run_batches(stream, [tagged_rows(b) for b in range(BATCHES)])
    assert _unique_ids(checkpoint, BATCHES), "no state files with unique ids"
    daemon = daemon_factory({job: str(checkpoint)})
    epochs = {job: stream.committed()}
    daemon.wait_for_epoch(job, BATCHES - 1)
    oracles = spark_variables(session, {job: checkpoint}, epochs, VARIABLES)
    (metadata,) = session.read.format("state-metadata").load(str(checkpoint)).collect()
    with daemon.client() as client:
        assert_variables_served(client, job, metadata.operatorName, oracles[job], VARIABLES)
