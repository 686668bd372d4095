"""A serving process's copy of the main process's health, over real gRPC on a Unix socket:
it follows every status change, says NOT_SERVING while it cannot see the main process and
until told, comes back when the main process does, and stays NOT_SERVING once stopped."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from concurrent import futures
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from epochstate.daemon.server.health_mirror import HealthMirror
from tests.fixtures.zookeeper import eventually

SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING
SERVICES = ("", "epochstate.v1.EpochState")


def _main_process(socket: Path, statuses: dict[str, int]) -> tuple[grpc.Server, health.HealthServicer]:
    """A started server with a health servicer telling ``statuses``, on ``socket``."""
    servicer = health.HealthServicer()
    for service, status in statuses.items():
        servicer.set(service, status)
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
    health_pb2_grpc.add_HealthServicer_to_server(servicer, server)
    server.add_insecure_port(f"unix://{socket}")
    server.start()
    return server, servicer


@pytest.fixture
def socket(tmp_path: Path) -> Path:
    return tmp_path / "internal.sock"


@pytest.fixture
def mirrored(socket: Path) -> Iterator[tuple[HealthMirror, grpc.Channel]]:
    """A mirror of the server on ``socket`` (not started), and a channel to it served as a
    serving process serves it."""
    with grpc.insecure_channel(f"unix://{socket}") as main:
        mirror = HealthMirror(main, SERVICES, retry=0.1)
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        health_pb2_grpc.add_HealthServicer_to_server(mirror.servicer, server)
        port = server.add_insecure_port("127.0.0.1:0")
        server.start()
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            yield mirror, channel
        mirror.stop()
        server.stop(None).wait(30)


def statuses(channel: grpc.Channel) -> dict[str, int]:
    stub = health_pb2_grpc.HealthStub(channel)
    return {s: stub.Check(health_pb2.HealthCheckRequest(service=s), timeout=10).status for s in SERVICES}


def test_the_mirror_tells_what_the_main_process_tells_and_never_serving_when_it_cannot(
    socket: Path, mirrored: tuple[HealthMirror, grpc.Channel]
) -> None:
    mirror, channel = mirrored
    down = dict.fromkeys(SERVICES, NOT_SERVING)
    assert statuses(channel) == down  # not told yet
    server, main = _main_process(socket, {"": SERVING})
    try:
        mirror.start()
        assert not mirror.wait_told(0.5)  # the EpochState service is not set in the main process yet
        assert statuses(channel) == {"": SERVING, SERVICES[1]: NOT_SERVING}
        main.set(SERVICES[1], SERVING)
        assert mirror.wait_told(30)
        assert eventually(lambda: statuses(channel) == dict.fromkeys(SERVICES, SERVING), 30)
        main.set(SERVICES[1], NOT_SERVING)  # ingest stuck, say
        assert eventually(lambda: statuses(channel) == {"": SERVING, SERVICES[1]: NOT_SERVING}, 30)
        main.set(SERVICES[1], SERVING)
        assert eventually(lambda: statuses(channel) == dict.fromkeys(SERVICES, SERVING), 30)
    finally:
        server.stop(None).wait(30)
    # The main process is gone: nothing is SERVING here, until it is back.
    assert eventually(lambda: statuses(channel) == down, 30), statuses(channel)
    server, main = _main_process(socket, dict.fromkeys(SERVICES, SERVING))
    try:
        assert eventually(lambda: statuses(channel) == dict.fromkeys(SERVICES, SERVING), 30)
        threads = [t for t in threading.enumerate() if t.name.startswith("health-mirror-")]
        assert len(threads) == len(SERVICES)
        mirror.stop()
        assert statuses(channel) == down
        main.set("", SERVING)  # told again after the stop: not heard
        assert statuses(channel) == down
        assert not any(t.is_alive() for t in threads)
    finally:
        server.stop(None).wait(30)
