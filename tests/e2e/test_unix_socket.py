"""The daemon's Unix socket: the same answers as TCP, its file's lifecycle, bad paths."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from epochstate.client import EpochStateClient
from epochstate.spark_plugin import attach
from epochstate.v1 import epochstate_pb2 as pb
from tests.e2e.test_reads import SCHEMA, counts, orders
from tests.fixtures.daemon import DaemonProcess
from tests.fixtures.streams import FileStream


def _answers(target: str, epoch: int) -> list[bytes]:
    """Raw response bytes of Get, MultiGet, two Scan pages and health checks over ``target``."""
    store = pb.StoreRef(job="orders")
    keys = [pb.Row(fields=[pb.Value(string=f"u{i}")]) for i in (1, 3, 9)]  # u9 is absent
    pinned = pb.EpochSelector(exact=epoch)
    with grpc.insecure_channel(target) as channel:

        def raw(method: str, request: Any) -> bytes:
            call = channel.unary_unary(
                f"/epochstate.v1.EpochState/{method}", lambda r: r.SerializeToString(), None
            )
            answer: bytes = call(request, timeout=10)
            return answer

        page = pb.ScanRequest(store=store, epoch=pinned, limit=2)
        first_page = raw("Scan", page)
        page.page_token = pb.ScanResponse.FromString(first_page).next_page_token
        answers = [
            raw("Get", pb.GetRequest(store=store, key=keys[0], epoch=pinned)),
            raw("Get", pb.GetRequest(store=store, key=keys[2], epoch=pinned)),
            raw("MultiGet", pb.MultiGetRequest(store=store, keys=keys, epoch=pinned)),
            first_page,
            raw("Scan", page),
        ]
        health = health_pb2_grpc.HealthStub(channel)
        for service in ("", "epochstate.v1.EpochState"):
            check = health.Check(health_pb2.HealthCheckRequest(service=service), timeout=10)
            answers.append(check.SerializeToString())
    return answers


def test_reads_and_reports_over_the_unix_socket_match_tcp(
    spark: Any, tmp_path: Path, daemon_factory: Callable[..., DaemonProcess]
) -> None:
    # A long poll interval: the job becomes known only through the listener's reports.
    daemon = daemon_factory({}, extra_args=["--poll-interval", "60"])
    socket_file = tmp_path / "daemon" / "epochstate.sock"
    assert daemon.unix_target == f"unix://{socket_file}"
    checkpoint = str(tmp_path / "cp")
    reporter = attach(spark, daemon.unix_target, checkpoints={"orders": checkpoint})
    stream = FileStream(spark, tmp_path / "in", tmp_path / "cp", counts, SCHEMA, name="orders").start()
    try:
        for batch in range(2):
            stream.feed(orders(batch))
        daemon.wait_for_epoch("orders", 1, timeout=30)
    finally:
        stream.stop()
        spark.streams.removeListener(reporter)
        reporter.close()
    assert reporter.sent >= 1 and reporter.dropped == 0

    over_tcp = _answers(daemon.target, 1)
    over_unix = _answers(daemon.unix_target, 1)
    assert over_unix == over_tcp
    # The answers are real ones: found and absent keys, two full pages of u0..u4.
    assert [pb.GetResponse.FromString(a).record.found for a in over_tcp[:2]] == [True, False]
    assert [r.found for r in pb.MultiGetResponse.FromString(over_tcp[2]).records] == [True, True, False]
    assert [len(pb.ScanResponse.FromString(a).records) for a in over_tcp[3:5]] == [2, 2]
    with EpochStateClient(daemon.unix_target, timeout=10) as unix, EpochStateClient(daemon.target) as tcp:
        assert list(unix.scan("orders", epoch=1)) == list(tcp.scan("orders", epoch=1))
        assert [lk.found for lk in unix.multi_get("orders", [["u1"], ["u9"]], epoch=1)] == [True, False]

    assert daemon.stop() == 0
    assert not socket_file.exists()  # removed on a clean shutdown


def _daemon(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "epochstate.cli.app",
            "daemon",
            "--data-dir",
            str(tmp_path / "other"),
            "--listen",
            "127.0.0.1:0",
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_stale_socket_is_replaced_and_unusable_paths_are_refused(
    tmp_path: Path, daemon_factory: Callable[..., DaemonProcess]
) -> None:
    daemon = daemon_factory({})
    socket_file = tmp_path / "daemon" / "epochstate.sock"
    daemon.kill()  # a crash leaves the socket file behind
    assert socket_file.is_socket()
    daemon.start()
    with EpochStateClient(daemon.unix_target, timeout=10) as client:
        assert client.jobs() == []

    in_use = _daemon(tmp_path, "--listen-unix", str(socket_file))
    assert in_use.returncode == 1
    assert f"cannot serve on Unix socket {socket_file}: another process is serving on it" in in_use.stderr
    with EpochStateClient(daemon.unix_target, timeout=10) as client:
        assert client.jobs() == []  # the running daemon still owns its socket

    (tmp_path / "plain").write_text("")
    cases = {
        str(tmp_path / "missing" / "d.sock"): f"directory {tmp_path / 'missing'} does not exist",
        str(tmp_path / "plain"): "a file that is not a socket is in the way",
        str(tmp_path / ("x" * 120)): "a Unix socket path holds at most 107",
    }
    for path, reason in cases.items():
        refused = _daemon(tmp_path, "--listen-unix", path)
        assert refused.returncode == 1 and reason in refused.stderr, (path, refused.stderr)
