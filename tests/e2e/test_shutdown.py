"""SIGTERM on the real daemon process: health NOT_SERVING, calls in flight answered, the
Unix socket removed, the store closed, ZooKeeper left; exit code 0 (what a kubelet's
``terminationGracePeriodSeconds`` must leave room for)."""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc
from kazoo.client import KazooClient

from epochstate.v1 import epochstate_pb2 as pb
from epochstate.v1 import epochstate_pb2_grpc as pb_grpc
from tests.e2e.test_reads import SCHEMA, counts, orders
from tests.fixtures.daemon import DaemonProcess
from tests.fixtures.streams import FileStream
from tests.fixtures.zookeeper import eventually


def test_sigterm_answers_calls_in_flight_leaves_zookeeper_and_exits_0(
    spark: Any,
    tmp_path: Path,
    zk_connect: str,
    zk_client: KazooClient,
    daemon_factory: Callable[..., DaemonProcess],
) -> None:
    stream = FileStream(spark, tmp_path / "in", tmp_path / "cp", counts, SCHEMA, name="drain").start()
    try:
        stream.feed(orders(0))
        stream.feed(orders(1))
    finally:
        stream.stop()
    daemon = daemon_factory(
        {"drain": str(tmp_path / "cp")}, zookeeper=zk_connect, extra_args=["--node", "drain-node"]
    )
    daemon.wait_for_epoch("drain", 1)
    node = "/epochstate/nodes/drain-node"
    assert eventually(lambda: zk_client.exists(node) is not None, 30)
    socket_file = Path(daemon.unix_target.removeprefix("unix://"))
    assert socket_file.is_socket()

    answers: dict[str, Any] = {}
    with grpc.insecure_channel(daemon.target) as channel:
        stub = pb_grpc.EpochStateStub(channel)
        watch = stub.WatchEpochs(pb.WatchEpochsRequest(job="drain", after_epoch=-1), timeout=60)
        # A read that waits for an epoch the job has not committed: in flight at SIGTERM.
        waiting = stub.Get.future(
            pb.GetRequest(
                store=pb.StoreRef(job="drain", store="default"),
                key=pb.Row(fields=[pb.Value(string="u1")]),
                epoch=pb.EpochSelector(at_least=50),
            ),
            timeout=60,
        )

        def drain_watch() -> None:
            try:
                answers["watched"] = [info.epoch for info in watch]
            except grpc.RpcError as error:
                answers["watch_error"] = error.code()

        watcher = threading.Thread(target=drain_watch)
        watcher.start()
        time.sleep(1.0)  # both calls reached the daemon
        assert not waiting.done()
        assert daemon.process is not None
        started = time.monotonic()
        daemon.process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 30
        while not waiting.done() and time.monotonic() < deadline:
            time.sleep(0.05)
        error = waiting.exception()
        assert isinstance(error, grpc.RpcError)
        # Answered, with the reason, before the grace period ran out: not cut off.
        assert error.code() == grpc.StatusCode.UNAVAILABLE
        assert "shutting down" in (error.details() or "")
        watcher.join(30)
        assert answers == {"watched": []}  # the stream ended cleanly, not cancelled
        assert daemon.process.wait(30) == 0
        assert time.monotonic() - started < 5.0 + 10  # shutdown_grace (5 s) and the rest
    assert not socket_file.exists()
    assert zk_client.exists(node) is None  # its session closed: the ephemeral znode is gone
    log = daemon.log_tail(50)
    assert "shutting down" in log and "Traceback" not in log
