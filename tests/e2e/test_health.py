"""Honest health against the real daemon: NOT_SERVING while ZooKeeper is lost beyond the
session timeout or ingest is stuck, SERVING again once it recovers.

Ingest is made stuck the way a hung network filesystem would: the state files of the
next committed epoch are named pipes, so the daemon's read of them blocks until the test
writes their real bytes in.
"""

from __future__ import annotations

import os
import shutil
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from epochstate.devtools.zookeeper import EmbeddedZooKeeper
from tests.e2e.test_probes import health
from tests.e2e.test_reads import SCHEMA, counts, orders
from tests.fixtures.daemon import DaemonProcess
from tests.fixtures.metrics import free_port, sample_values
from tests.fixtures.streams import FileStream, copy_checkpoint
from tests.fixtures.zookeeper import EXPIRING_SESSION_TIMEOUT, eventually

SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING
OVERALL, READS, ADMIN = "", "epochstate.v1.EpochState", "epochstate.v1.AlignmentAdmin"


CONNECTIONS = 12  # the kernel spreads connections over the serving processes by hash


def statuses(channel: grpc.Channel) -> dict[str, int]:
    """Each service's health status (every check must answer, whatever it says)."""
    stub = health_pb2_grpc.HealthStub(channel)
    return {
        name: stub.Check(health_pb2.HealthCheckRequest(service=name), timeout=10).status
        for name in (OVERALL, READS, ADMIN)
    }


def test_not_serving_while_zookeeper_is_lost_beyond_the_session_timeout(
    private_zookeeper_server: EmbeddedZooKeeper, daemon_factory: Callable[..., DaemonProcess]
) -> None:
    zookeeper = private_zookeeper_server
    metrics, probes = free_port(), free_port()
    daemon = daemon_factory(
        {},
        serve_processes=2,  # each connection is told the same, whichever process has it
        zookeeper=f"{zookeeper.connect_string}/health",
        env={
            # Short: the test waits it out before the daemon may say NOT_SERVING.
            "EPOCHSTATE_ZOOKEEPER_SESSION_TIMEOUT": str(EXPIRING_SESSION_TIMEOUT),
            "EPOCHSTATE_METRICS_PORT": str(metrics),
        },
        extra_args=["--health-listen", f"127.0.0.1:{probes}"],
    )
    everything = dict.fromkeys((OVERALL, READS, ADMIN), SERVING)

    def zookeeper_state() -> str:
        states = sample_values(metrics, "epochstate_zookeeper_state", "state")
        return next(state for state, on in states.items() if on)

    # The probe port (plaintext, health only) tells what the daemon's own port tells.
    probe_target = f"127.0.0.1:{probes}"
    own = (("grpc.use_local_subchannel_pool", 1),)  # a connection of its own each
    channels = [grpc.insecure_channel(daemon.target, options=own) for _ in range(CONNECTIONS)]

    def everywhere(expected: dict[str, int]) -> bool:
        return all(statuses(channel) == expected for channel in channels)

    with grpc.insecure_channel(daemon.target) as channel, grpc.insecure_channel(probe_target) as probe:
        assert eventually(lambda: everywhere(everything), 60, 0.2), statuses(channel)
        assert statuses(probe) == everything
        assert zookeeper_state() == "connected"
        zookeeper.stop()
        lost = dict.fromkeys((OVERALL, READS, ADMIN), NOT_SERVING)
        assert eventually(lambda: statuses(channel) == lost, 120, 0.2), statuses(channel)
        # The serving process's health follows the main one's within a stream's message.
        assert eventually(lambda: everywhere(lost), 5, 0.2), [statuses(c) for c in channels]
        assert eventually(lambda: statuses(probe) == lost, 5, 0.2), statuses(probe)
        assert zookeeper_state() in ("suspended", "lost")
        # Both CLI processes at once (each is mostly its start-up).
        with ThreadPoolExecutor(2) as pool:
            done, alive = pool.map(
                lambda extra: health("health", "--target", probe_target, *extra),
                [(), ("--service", "liveness")],
            )
        assert (done.returncode, done.stderr) == (1, f"error: {probe_target}: the daemon is NOT_SERVING\n")
        # Liveness stays SERVING: a restart would not bring ZooKeeper back.
        assert alive.returncode == 0
        zookeeper.start()
        assert eventually(lambda: everywhere(everything), 120, 0.2), [statuses(c) for c in channels]
        assert eventually(lambda: zookeeper_state() == "connected", 30, 0.2)
    for each in channels:
        each.close()
    assert "health: NOT_SERVING: ZooKeeper unreachable" in daemon.log_tail(200)


def _feed(pipe: Path, data: bytes) -> None:
    with pipe.open("wb") as writer:  # blocks until the daemon opens it to read
        writer.write(data)


def test_not_serving_while_ingest_is_stuck_then_serving_again(
    spark: Any, tmp_path: Path, daemon_factory: Callable[..., DaemonProcess]
) -> None:
    source = tmp_path / "source"
    stream = FileStream(spark, tmp_path / "in", source, counts, SCHEMA, name="stuck").start()
    try:
        for batch in range(3):
            stream.feed(orders(batch))
    finally:
        stream.stop()
    checkpoint = tmp_path / "cp"
    copy_checkpoint(source, checkpoint)
    (checkpoint / "commits" / "2").unlink()  # epoch 2 (store version 3) commits later

    metrics = free_port()
    daemon = daemon_factory(
        {"stuck": str(checkpoint)},
        env={"EPOCHSTATE_INGEST_STUCK_AFTER": "2", "EPOCHSTATE_METRICS_PORT": str(metrics)},
    )
    daemon.wait_for_epoch("stuck", 1)

    def lag(name: str) -> float:
        return sample_values(metrics, f"epochstate_lag_{name}", "job")["stuck"]

    with grpc.insecure_channel(daemon.target) as channel:
        assert eventually(lambda: statuses(channel)[OVERALL] == SERVING, 60, 0.2)
        assert (lag("epochs"), lag("seconds")) == (0, 0)
        deltas = sorted(checkpoint.glob("state/0/*/3.delta"))
        assert deltas
        held = {delta: delta.read_bytes() for delta in deltas}
        for delta in deltas:
            delta.unlink()
            os.mkfifo(delta)
        commit = checkpoint / "commits" / "2"
        shutil.copy(source / "commits" / "2", commit.with_suffix(".tmp"))
        commit.with_suffix(".tmp").rename(commit)

        stuck = {OVERALL: NOT_SERVING, READS: NOT_SERVING, ADMIN: SERVING}
        assert eventually(lambda: statuses(channel) == stuck, 120, 0.2), statuses(channel)
        with daemon.client() as client:
            assert client.get("stuck", ["u1"], epoch=1).epoch == 1  # what is ingested serves on
        # Spark's newest commit is one epoch ahead of the newest queryable one, and for longer
        # than health waited to call it stuck.
        assert lag("epochs") == 1 and lag("seconds") >= 2

        feeders = [threading.Thread(target=_feed, args=item, daemon=True) for item in held.items()]
        for feeder in feeders:
            feeder.start()
        daemon.wait_for_epoch("stuck", 2, timeout=120)
        for feeder in feeders:
            feeder.join(30)
        for delta, data in held.items():  # no pipe left for a later read to block on
            delta.unlink()
            delta.write_bytes(data)
        recovered = dict.fromkeys((OVERALL, READS, ADMIN), SERVING)
        assert eventually(lambda: statuses(channel) == recovered, 60, 0.2), statuses(channel)
        assert (lag("epochs"), lag("seconds")) == (0, 0)
    assert "no epoch after 1 was ingested" in daemon.log_tail(200)
