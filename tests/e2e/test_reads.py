"""Push from the Spark listener, idempotent pinned reads, waiting, and bad input."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc
import pytest

from epochstate.client import (
    DeadlineExceeded,
    EpochNotReady,
    EpochRetired,
    InvalidArgument,
    NotFound,
)
from epochstate.spark_plugin import attach
from epochstate.v1 import epochstate_pb2 as pb
from tests.fixtures.daemon import DaemonProcess
from tests.fixtures.streams import FileStream
from tests.fixtures.zookeeper import eventually


def counts(frame: Any) -> Any:
    from pyspark.sql import functions as F

    return frame.groupBy("user").agg(F.count("*").alias("orders"), F.sum("amount").alias("spent"))


def orders(batch: int, users: int = 5) -> list[dict[str, Any]]:
    return [{"user": f"u{(batch + i) % users}", "amount": batch * 10 + i} for i in range(4)]


SCHEMA = "user string, amount long"


def test_listener_push_and_pinned_reads_are_byte_identical(
    spark: Any, tmp_path: Path, daemon_factory: Callable[..., DaemonProcess]
) -> None:
    # A long poll interval: only the listener's push can make epochs fresh quickly.
    daemon = daemon_factory({}, extra_args=["--poll-interval", "60"])
    checkpoint = str(tmp_path / "cp")
    reporter = attach(spark, daemon.target, checkpoints={"orders": checkpoint})
    stream = FileStream(spark, tmp_path / "in", tmp_path / "cp", counts, SCHEMA, name="orders").start()
    try:
        stream.feed(orders(0))
        stream.feed(orders(1))
        daemon.wait_for_epoch("orders", 1, timeout=20)
        request = pb.GetRequest(
            store=pb.StoreRef(job="orders", operator_id=0),
            key=pb.Row(fields=[pb.Value(string="u1")]),
            epoch=pb.EpochSelector(exact=1),
        )
        with daemon.client() as client:
            first = client.stub.Get(request).SerializeToString(deterministic=True)
            latest_before = client.get("orders", ["u1"]).epoch
            for batch in range(2, 5):
                stream.feed(orders(batch))
            daemon.wait_for_epoch("orders", stream.committed()[-1], timeout=20)
            again = client.stub.Get(request).SerializeToString(deterministic=True)
            latest_after = client.get("orders", ["u1"])
        assert again == first
        assert latest_after.epoch > latest_before
        assert latest_after.value is not None and latest_after.value["count"] >= 2  # buffer field names
        # Spark's listener bus may hand the listener a batch's progress after the batch (and the
        # daemon, from one report's checkpoint read) moved on.
        assert eventually(lambda: reporter.sent >= 2, 60), (reporter.sent, reporter.dropped)
    finally:
        stream.stop()
        spark.streams.removeListener(reporter)
        reporter.close()


def test_listener_reports_to_the_next_target_when_the_first_is_down(
    spark: Any, tmp_path: Path, daemon_factory: Callable[..., DaemonProcess]
) -> None:
    daemon = daemon_factory({}, extra_args=["--poll-interval", "60"])
    checkpoint = str(tmp_path / "cp")
    # Nothing listens on the discard port: the daemon after it is the home daemon.
    reporter = attach(spark, f"127.0.0.1:9, {daemon.target}", checkpoints={"relayed": checkpoint})
    stream = FileStream(spark, tmp_path / "in", tmp_path / "cp", counts, SCHEMA, name="relayed").start()
    try:
        for batch in range(3):
            stream.feed(orders(batch))
        daemon.wait_for_epoch("relayed", stream.committed()[-1], timeout=30)
        # The daemon may have read every epoch on the first report; the others come when
        # Spark's listener bus hands them over (removing the listener first would lose them).
        assert eventually(lambda: reporter.sent >= 2, 60), (reporter.sent, reporter.dropped)
    finally:
        stream.stop()
        spark.streams.removeListener(reporter)
        reporter.close()
    assert reporter.sent >= 2 and reporter.dropped == 0 and reporter.refused == 0
    assert reporter.pushed == 0  # a standalone daemon: it is the job's one replica, the home


def test_listener_never_blocks_spark_when_daemon_is_down(spark: Any, tmp_path: Path) -> None:
    reporter = attach(spark, "127.0.0.1:9")  # nothing listens on the discard port
    stream = FileStream(spark, tmp_path / "in", tmp_path / "cp", counts, SCHEMA, name="lonely").start()
    try:
        started = time.monotonic()
        for batch in range(3):
            stream.feed(orders(batch))
        elapsed = time.monotonic() - started
        # Spark's listener bus hands the batches' progress to the listener after they
        # committed: on a busy machine, after the last one. Removing the listener first
        # would lose them (Spark's bus, not ours).
        assert eventually(lambda: reporter.dropped >= 1, 60), (reporter.sent, reporter.dropped)
    finally:
        stream.stop()
        spark.streams.removeListener(reporter)
        reporter.close()
    assert stream.committed()[-1] >= 2
    assert reporter.dropped >= 1 and reporter.sent == 0
    assert elapsed < 60


@pytest.fixture
def retained(spark: Any, tmp_path: Path, daemon_factory: Callable[..., DaemonProcess]) -> Any:
    """A job with 6 epochs on a daemon that retains 3."""
    stream = FileStream(spark, tmp_path / "in", tmp_path / "cp", counts, SCHEMA, name="shop").start()
    daemon = daemon_factory(
        {"shop": str(tmp_path / "cp")}, extra_args=["--retention-epochs", "3"], wait=False
    )
    for batch in range(6):
        stream.feed(orders(batch))
    daemon.wait_for_epoch("shop", stream.committed()[-1])
    yield stream, daemon
    stream.stop()


def test_bad_input_gets_status_codes_and_messages(retained: Any) -> None:
    stream, daemon = retained
    newest = stream.committed()[-1]
    with daemon.client(timeout=5) as client:
        cases: list[tuple[type[Exception], Callable[[], Any], str]] = [
            (NotFound, lambda: client.get("nope", ["u1"]), "unknown job"),
            (
                NotFound,
                lambda: client.stub.Get(
                    pb.GetRequest(
                        store=pb.StoreRef(job="shop", operator_id=7),
                        key=pb.Row(fields=[pb.Value(string="u")]),
                    )
                ),
                "no store 7/default",
            ),
            (InvalidArgument, lambda: client.get("shop", [1]), "expected string"),
            (InvalidArgument, lambda: client.get("shop", ["u1", "extra"]), "has 1 field(s)"),
            (InvalidArgument, lambda: client.get("shop", ["x" * 70_000]), "limit"),
            (EpochNotReady, lambda: client.get("shop", ["u1"], epoch=newest + 5), "has not committed yet"),
            (
                DeadlineExceeded,
                lambda: client.get("shop", ["u1"], epoch=newest + 5, wait=True, timeout=3.0),
                "deadline",
            ),
            (EpochRetired, lambda: client.get("shop", ["u1"], epoch=0), "older than retention"),
            (InvalidArgument, lambda: client.get("shop", ["u1"], epoch=-1), ">= 0"),
        ]
        for kind, call, text in cases:
            with pytest.raises(Exception) as caught:
                call()
            error = caught.value
            if isinstance(error, grpc.RpcError):
                assert kind is NotFound and error.code() == grpc.StatusCode.NOT_FOUND
                assert text in (error.details() or "")
            else:
                assert isinstance(error, kind), (text, error)
                assert text in str(error), (text, str(error))
        bad_token = pb.ScanRequest(store=pb.StoreRef(job="shop"), page_token=b"\x01")
        with pytest.raises(grpc.RpcError) as scan_error:
            client.stub.Scan(bad_token)
        assert scan_error.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        # The daemon keeps serving after all of that.
        assert client.get("shop", ["u1"]).found


def test_at_least_waits_for_the_epoch(retained: Any) -> None:
    stream, daemon = retained
    newest = stream.committed()[-1]
    feeder = threading.Timer(0.5, lambda: stream.feed(orders(6)))
    feeder.start()
    try:
        with daemon.client(timeout=60) as client:
            found = client.get("shop", ["u1"], at_least=newest + 1)
        assert found.epoch >= newest + 1
    finally:
        feeder.join()


def test_cli_prints_answers_and_exit_codes(retained: Any) -> None:
    import subprocess
    import sys

    stream, daemon = retained
    newest = stream.committed()[-1]

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "epochstate.cli.app", *args, "--target", daemon.target],
            capture_output=True,
            text=True,
            timeout=60,
        )

    ok = cli("get", "shop", '["u1"]', "--epoch", str(newest), "--json")
    assert ok.returncode == 0, ok.stderr
    [answer] = [json.loads(line) for line in ok.stdout.splitlines()]
    assert (answer["epoch"], answer["found"]) == (newest, True)
    assert cli("get", "missing-job", "u1").returncode == 3
    assert cli("get", "shop", "[1]").returncode == 4
    assert cli("get", "shop", "u1", "--epoch", "0").returncode == 5
    assert cli("get", "shop", "u1", "--epoch", "soon").returncode == 2
    described = cli("describe", "shop", "--json")
    assert described.returncode == 0 and "struct<user:string>" in described.stdout


def test_watch_streams_new_epochs_and_list_epochs_has_positions(retained: Any) -> None:
    stream, daemon = retained
    newest = stream.committed()[-1]
    seen: list[int] = []
    with daemon.client(timeout=60) as client:

        def watch() -> None:
            for info in client.watch("shop"):
                seen.append(info.epoch)
                if len(seen) == 2:
                    return

        watcher = threading.Thread(target=watch)
        watcher.start()
        time.sleep(0.5)
        stream.feed(orders(6))
        stream.feed(orders(7))
        watcher.join(60)
        assert seen == [newest + 1, newest + 2]
        epochs = client.epochs("shop")
        assert [e.epoch for e in epochs] == list(range(newest + 2 - 2, newest + 3))  # retention 3
        last = epochs[-1]
        assert last.sources and '"logOffset"' in last.sources[0].end_offset_json
        assert last.committed_at_ms <= last.ingested_at_ms
