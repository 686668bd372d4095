"""Job lifecycle: a batch re-run after a failure computes other state than the failed
attempt, and a checkpoint deleted and recreated (a new query id). (Every operator on
every provider runs through a restart and a re-run epoch in tests/fixtures/scenario.py.)"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from epochstate.client import EpochNotReady, EpochStateClient
from tests.e2e.test_reads import SCHEMA, counts, orders
from tests.fixtures.daemon import DaemonProcess
from tests.fixtures.oracle import plain, served, spark_state
from tests.fixtures.streams import PROVIDERS, FileStream, Provider


def noisy_totals(frame: Any) -> Any:
    from pyspark.sql import functions as F

    # rand(): a re-run of a batch computes different state than the failed attempt,
    # so serving the failed attempt's files would show.
    noisy = frame.withColumn("r", F.rand())
    return noisy.groupBy("user").agg(F.sum("r").alias("noise"), F.count("*").alias("n"))


@pytest.mark.parametrize("provider", PROVIDERS, ids=str)
def test_a_batch_rerun_after_failure_serves_only_the_committed_result(
    spark: Any, tmp_path: Path, daemon_factory: Callable[..., DaemonProcess], provider: Provider
) -> None:
    fail_flag = tmp_path / "fail"
    emitted: list[tuple[int, bool, dict[str, dict[str, Any]]]] = []

    def sink(frame: Any, batch_id: int) -> None:
        # The state stores of the batch commit their files while this collects.
        rows = {r.user: {"sum": r.noise, "count": r.n} for r in frame.collect()}
        failing = fail_flag.exists()
        emitted.append((batch_id, failing, rows))
        if failing:
            raise RuntimeError(f"injected failure in batch {batch_id}")

    session = provider.session(spark)
    stream = FileStream(
        session, tmp_path / "in", tmp_path / "cp", noisy_totals, SCHEMA, name="rerun", sink=sink
    ).start()
    daemon = daemon_factory(
        {"rerun": str(tmp_path / "cp")}, extra_args=["--poll-interval", "0.05"], wait=False
    )
    try:
        stream.feed(orders(0))
        stream.feed(orders(1))
        daemon.wait_for_epoch("rerun", 1)
        fail_flag.touch()
        with pytest.raises(Exception, match="injected failure"):
            stream.feed(orders(2))
        stream.stop()
        # Batch 2 wrote its state files but never committed: nothing of it is served.
        assert (tmp_path / "cp" / "offsets" / "2").exists()
        assert not (tmp_path / "cp" / "commits" / "2").exists()
        assert any((tmp_path / "cp" / "state" / "0").glob("*/3.*"))
        with daemon.client() as client, pytest.raises(EpochNotReady, match="has not committed"):
            client.get("rerun", ["u1"], epoch=2)
        fail_flag.unlink()
        stream.start(fresh=False)  # re-runs batch 2, overwriting its uncommitted files
        stream.query.processAllAvailable()
    finally:
        stream.stop()
    assert (tmp_path / "cp" / "commits" / "2").exists()
    (failed,) = [rows for batch, failing, rows in emitted if batch == 2 and failing]
    (committed,) = [rows for batch, failing, rows in emitted if batch == 2 and not failing]
    assert failed != committed  # rand(): the two attempts computed different state

    # The committed state of epoch 2: epoch 1's state, updated by what the committed
    # attempt emitted (update mode emits every key the batch changed).
    before = {key["user"]: value for key, value, _ in spark_state(spark, tmp_path / "cp", 1).values()}
    truth = {**before, **committed}

    def served_values(target: str, epoch: int) -> dict[str, Any]:
        with EpochStateClient(target) as client:
            return {lk.key["user"]: plain(lk.value) for lk in client.scan("rerun", epoch=epoch)}

    daemon.wait_for_epoch("rerun", 2)
    for epoch in (0, 1):
        with daemon.client() as client:
            assert served(client, "rerun", epoch) == spark_state(spark, tmp_path / "cp", epoch)
    assert served_values(daemon.target, 2) == truth  # ingested incrementally, from deltas
    # A daemon that starts late loads epoch 2 whole (snapshot + deltas); Spark's
    # maintenance may have snapshotted the failed attempt: that snapshot must be skipped.
    late = daemon_factory(
        {"rerun": str(tmp_path / "cp")}, name="late", extra_args=["--retention-epochs", "1"]
    )
    late.wait_for_epoch("rerun", 2)
    assert served_values(late.target, 2) == truth


def test_recreated_checkpoint_starts_a_new_query(
    spark: Any, tmp_path: Path, daemon_factory: Callable[..., DaemonProcess]
) -> None:
    checkpoint = tmp_path / "cp"
    first = FileStream(spark, tmp_path / "in", checkpoint, counts, SCHEMA, name="again").start()
    daemon = daemon_factory({"again": str(checkpoint)}, wait=False)
    try:
        for batch in range(3):
            first.feed(orders(batch))
    finally:
        first.stop()
    daemon.wait_for_epoch("again", 2)
    with daemon.client() as client:
        old_query = client.describe("again", refresh=True).query_id
    _remove_checkpoint(checkpoint)
    second = FileStream(spark, tmp_path / "in2", checkpoint, counts, SCHEMA, name="again").start()
    try:
        second.feed(orders(10))
    finally:
        second.stop()
    with daemon.client() as client:
        for _ in range(200):
            description = client.describe("again", refresh=True)
            if description.query_id != old_query and description.latest_epoch == 0:
                break
            time.sleep(0.05)
        assert description.query_id != old_query and description.latest_epoch == 0
        assert served(client, "again", 0) == spark_state(spark, checkpoint, 0)
        with pytest.raises(EpochNotReady):
            client.get("again", ["u1"], epoch=2)  # the old query's epoch 2 is gone


def _remove_checkpoint(checkpoint: Path) -> None:
    """Delete a stopped query's checkpoint. Spark's state store maintenance thread can
    still write a snapshot file into it just after the query stops (seen in CI:
    ``rmtree`` failed with "Directory not empty"), so try again until it is gone."""
    deadline = time.monotonic() + 30
    while True:
        try:
            shutil.rmtree(checkpoint)
            return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)
