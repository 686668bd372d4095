"""The call limits are the daemon's, however many processes serve it: with two serving
processes and ``limit_streams: 6``, six streams at once on the daemon, not six on each;
and the slots of a serving process killed with calls in flight are free again once it
has been started again."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from epochstate.client.channels import LOCAL_SUBCHANNEL_POOL
from epochstate.client.errors import TooManyCalls, from_rpc_error
from epochstate.daemon.server.limits import CallKind
from epochstate.daemon.server.processes import calls_file
from epochstate.daemon.server.shared_limits import SharedCalls
from tests.fixtures.daemon import DaemonProcess

LIMIT = 6
# All on one process: odds of 1 in 2^15; there, per-process limits would admit 6 too.
CONNECTIONS = 16
STREAMS = list(CallKind).index(CallKind.STREAM)


def open_streams(target: str, count: int) -> tuple[list[grpc.Channel], list[Iterator[Any]], int]:
    """``count`` health Watch streams, each on a connection of its own: the channels, the
    admitted streams (each answered its first status) and how many were refused."""
    channels = [grpc.insecure_channel(target, options=[LOCAL_SUBCHANNEL_POOL]) for _ in range(count)]
    admitted, refused = [], 0
    for channel in channels:
        stream = health_pb2_grpc.HealthStub(channel).Watch(health_pb2.HealthCheckRequest(), timeout=60)
        try:
            assert next(stream).status == health_pb2.HealthCheckResponse.SERVING
            admitted.append(stream)
        except grpc.RpcError as error:
            assert isinstance(from_rpc_error(error), TooManyCalls), error
            refused += 1
    return channels, admitted, refused


def serving_pids(daemon: DaemonProcess) -> set[int]:
    assert daemon.process is not None
    tasks = Path(f"/proc/{daemon.process.pid}/task")  # each thread lists the children it started
    return {int(c) for task in tasks.iterdir() for c in (task / "children").read_text().split()}


def wait_until(condition: Callable[[], bool], what: str, seconds: float = 60.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.02)


def test_limits_hold_for_the_daemon_as_a_whole(daemon_factory: Callable[..., DaemonProcess]) -> None:
    daemon = daemon_factory({}, serve_processes=2, env={"EPOCHSTATE_LIMIT_STREAMS": str(LIMIT)})
    counts = SharedCalls(calls_file(daemon.data_dir / "serving"), 0, len(CallKind))
    try:
        channels, admitted, refused = open_streams(daemon.target, CONNECTIONS)
        assert (len(admitted), refused) == (LIMIT, CONNECTIONS - LIMIT)
        assert counts.in_flight(STREAMS) == LIMIT

        (killed,) = serving_pids(daemon)
        os.kill(killed, signal.SIGKILL)  # with whichever of the streams it held
        wait_until(lambda: len(serving_pids(daemon) - {killed}) == 1, "the serving process restarted")
        for stream in admitted:
            stream.cancel()  # type: ignore[attr-defined]
        for channel in channels:
            channel.close()
        wait_until(lambda: counts.in_flight(STREAMS) == 0, "every slot free again")

        channels, admitted, refused = open_streams(daemon.target, CONNECTIONS)
        assert (len(admitted), refused) == (LIMIT, CONNECTIONS - LIMIT)
        for channel in channels:
            channel.close()
    finally:
        counts.close()
