"""``AlignmentAdmin`` through the real daemon: CatchUp -> Ready -> Align(next) -> aligned -> Abort.

One real reader query over a one-partition subject the real sink wrote, a
daemon subprocess on the same ZooKeeper chroot; the CLI's status must agree
with the daemon's. Then the error cases, each with its status code.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import grpc
import pytest
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc
from kazoo.client import KazooClient
from typer.testing import CliRunner

from epochstate.cli.app import app
from epochstate.client import EpochStateClient
from epochstate.client.errors import CommandRefused, EpochStateClientError, Unavailable, from_rpc_error
from epochstate.devtools.zookeeper import EmbeddedZooKeeper
from epochstate.spark_plugin.alignment import register
from epochstate.v1 import epochstate_pb2 as pb
from epochstate.v1 import epochstate_pb2_grpc as pb_grpc
from tests.alignment.conftest import DownstreamJob, UpstreamJob, fresh_topic
from tests.fixtures.daemon import DaemonProcess
from tests.fixtures.kafka import KafkaBroker
from tests.fixtures.zookeeper import eventually

pytestmark = [pytest.mark.spark, pytest.mark.timeout(300)]

JOB = "reader-admin"
TIMEOUT = 90.0


@dataclass
class AdminRun:
    topic: str
    connect: str
    client: EpochStateClient
    catch_up: pb.AlignmentCommandResponse
    align: pb.AlignmentCommandResponse
    aligned: pb.SubjectAlignment
    cli_aligned: list[dict[str, Any]]
    catch_up_while_aligned: EpochStateClientError
    dry_run: pb.PruneSubjectResponse
    kept: pb.SubjectAlignment  # status with keep=2, while aligned
    pruned: pb.PruneSubjectResponse
    abort: pb.AlignmentCommandResponse
    reflected: set[str]


def source_of(client: EpochStateClient, topic: str) -> pb.AlignmentSource:
    (subject,) = client.alignment.status(topic)
    (source,) = subject.sources
    return source


def refused(call: Callable[[], object]) -> EpochStateClientError:
    with pytest.raises(EpochStateClientError) as failed:
        call()
    return failed.value


@pytest.fixture(scope="module")
def admin_run(
    spark: Any,
    kafka_broker: KafkaBroker,
    subjects_zookeeper: tuple[str, KazooClient],
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[AdminRun]:
    register(spark)
    connect, _ = subjects_zookeeper
    topic = fresh_topic(kafka_broker, 1)
    directory = tmp_path_factory.mktemp("admin")
    upstream = UpstreamJob(spark, directory / "upstream", topic, kafka_broker, connect, tasks=1)
    reader = DownstreamJob(spark, directory / JOB, topic, kafka_broker, connect, JOB, {"mode": "unaligned"})
    # Its own node name: another daemon of the session on this host must not share the replica znode.
    daemon = DaemonProcess(
        directory / "daemon", {}, zookeeper=connect, env={"EPOCHSTATE_NODE": "admin"}
    ).start()
    client = EpochStateClient(daemon.target, timeout=TIMEOUT)

    def feed(epoch: int) -> None:
        upstream.feed([f"e{epoch}-{i}" for i in range(3)])

    try:
        upstream.start()
        for epoch in range(3):
            feed(epoch)
        reader.start()
        assert eventually(lambda: bool(client.alignment.status(topic)[0].sources), TIMEOUT)
        catch_up = client.alignment.catch_up(topic, JOB, wait=TIMEOUT)
        align = client.alignment.align(topic, JOB)  # next: the first epoch it has not passed
        feed(3)
        feed(4)
        assert eventually(lambda: source_of(client, topic).subject_epoch == 4, TIMEOUT)
        reader.query.processAllAvailable()
        (aligned,) = client.alignment.status(topic)
        cli = CliRunner().invoke(app, ["align", "status", topic, "-z", connect, "--json"])
        assert cli.exit_code == 0, cli.output
        while_aligned = refused(lambda: client.alignment.catch_up(topic, JOB))
        dry_run = client.alignment.prune(topic, keep=2, dry_run=True)
        (kept,) = client.alignment.status(topic, keep=2)
        pruned = client.alignment.prune(topic, keep=2)
        abort = client.alignment.abort(topic, JOB, wait=TIMEOUT)
        with grpc.insecure_channel(daemon.target) as channel:
            stub = reflection_pb2_grpc.ServerReflectionStub(channel)
            request = reflection_pb2.ServerReflectionRequest(list_services="")
            (listed,) = list(stub.ServerReflectionInfo(iter([request]), timeout=10))
        reflected = {s.name for s in listed.list_services_response.service}
        yield AdminRun(
            topic,
            connect,
            client,
            catch_up,
            align,
            aligned,
            json.loads(cli.output),
            while_aligned,
            dry_run,
            kept,
            pruned,
            abort,
            reflected,
        )
    finally:
        client.close()
        daemon.stop()
        reader.stop()
        upstream.stop()


def test_catch_up_align_abort_through_the_daemon(admin_run: AdminRun) -> None:
    run = admin_run
    assert run.catch_up.command.name == "catch-up"
    assert run.catch_up.source.state == "ready" and run.catch_up.source.answered
    # The reader read everything up to epoch 2's end: epoch 3 is the first it has not passed.
    assert run.align.command.name == "align" and run.align.command.epoch == 3
    assert run.align.command.id == run.catch_up.command.id + 1
    (source,) = run.aligned.sources
    assert (source.job, source.state, source.subject_epoch) == (JOB, "aligned", 4)
    assert source.command.name == "align" and source.answered and not source.refused
    assert run.aligned.retention_horizon == 0 and run.aligned.holds
    assert run.catch_up_while_aligned.code == grpc.StatusCode.FAILED_PRECONDITION
    assert isinstance(run.catch_up_while_aligned, CommandRefused)
    assert "abort it first" in str(run.catch_up_while_aligned)
    assert run.abort.command.name == "abort" and run.abort.source.state == "unaligned"
    assert "epochstate.v1.AlignmentAdmin" in run.reflected


def test_cli_and_daemon_show_the_same_status(admin_run: AdminRun) -> None:
    (row,) = admin_run.cli_aligned
    (source,) = admin_run.aligned.sources
    command_id = source.command.id if source.HasField("command") else None
    from_daemon = {
        "job": source.job,
        "mode": source.mode,
        "state": source.state,
        "command_id": command_id,
        "answered": source.answered,
        "subject_epoch": source.subject_epoch if source.HasField("subject_epoch") else None,
        "batch": source.batch if source.HasField("batch") else None,
        "position": {str(p): o for p, o in sorted(source.position.items())},
        "refused": source.refused or None,
    }
    assert {name: row[name] for name in from_daemon} == from_daemon


def test_errors_map_to_status_codes(admin_run: AdminRun) -> None:
    admin, topic = admin_run.client.alignment, admin_run.topic
    cases: list[tuple[Callable[[], object], grpc.StatusCode, str]] = [
        (lambda: admin.status("no-such-subject"), grpc.StatusCode.NOT_FOUND, "no subject 'no-such-subject'"),
        (
            lambda: admin.catch_up(topic, "no-such-job"),
            grpc.StatusCode.NOT_FOUND,
            "has no source 'no-such-job'",
        ),
        (lambda: admin.align(topic, JOB, 3), grpc.StatusCode.FAILED_PRECONDITION, "is unaligned"),
        (lambda: admin.align(topic, JOB, -1), grpc.StatusCode.INVALID_ARGUMENT, "at least 0"),
        (lambda: admin.prune(topic, keep=1), grpc.StatusCode.INVALID_ARGUMENT, "at least"),
        (lambda: admin.status("bad/name"), grpc.StatusCode.INVALID_ARGUMENT, "topic name"),
    ]
    for call, code, message in cases:
        error = refused(call)
        assert (error.code, message in str(error)) == (code, True), str(error)
    bare = pb.AlignRequest(subject=topic, job=JOB)  # neither an epoch nor next
    with pytest.raises(grpc.RpcError) as failed:
        admin._stub.Align(bare, timeout=10)
    assert failed.value.code() == grpc.StatusCode.INVALID_ARGUMENT


def test_prune_keeps_what_the_aligned_source_holds(admin_run: AdminRun) -> None:
    run = admin_run
    # Epochs 0-4; the source read epoch 4 last (a restart reads it again: 3 must stay), keep=2: 3 and 4.
    assert run.dry_run.horizon == 3 and not run.dry_run.deleted_epochs
    assert any(f"source {JOB!r} read epoch 4 last" == h.reason and h.epoch == 3 for h in run.dry_run.holds)
    assert (run.kept.retention_horizon, list(run.kept.holds)) == (
        run.dry_run.horizon,
        list(run.dry_run.holds),
    )
    assert (run.pruned.horizon, list(run.pruned.deleted_epochs)) == (3, [0, 1, 2])


def test_zookeeper_down_is_unavailable_within_the_call_deadline(
    private_zookeeper_server: EmbeddedZooKeeper, daemon_factory: Callable[..., DaemonProcess]
) -> None:
    server = private_zookeeper_server
    # A 24 s session: kazoo notices a frozen server after 2/3 of it (16 s), long after
    # the call's 8 s, so only the call's deadline can end the call's requests.
    daemon = daemon_factory(
        {}, zookeeper=server.connect_string, env={"EPOCHSTATE_ZOOKEEPER_SESSION_TIMEOUT": "24"}
    )
    with EpochStateClient(daemon.target, timeout=3) as client:
        assert client.alignment.status() == []  # no subject yet
    pid = server.pid
    assert pid is not None
    # Frozen, ZooKeeper keeps its sockets open and answers nothing: the daemon's session
    # still counts as connected, so each request waits for an answer that never comes,
    # as when ZooKeeper dies mid-request. The registry's own timeout (10 s a request)
    # and kazoo's noticing the frozen server would outlast the call's 8 s: the call's
    # deadline bounds its requests (less the margin to send the answer, up to 1 s: room
    # on a loaded machine), and it ends UNAVAILABLE, not DEADLINE_EXCEEDED.
    # The daemon's own stub: the client would retry UNAVAILABLE until its deadline.
    with grpc.insecure_channel(daemon.target) as channel:
        stub = pb_grpc.AlignmentAdminStub(channel)
        os.kill(pid, signal.SIGSTOP)
        try:
            frozen = rpc_error(lambda: stub.Status(pb.AlignmentStatusRequest(), timeout=8))
        finally:
            server.kill()  # a stopped process is killed as well: ZooKeeper is now gone
        gone = rpc_error(lambda: stub.Status(pb.AlignmentStatusRequest(), timeout=8))
    for error in (frozen, gone):
        assert error.code() == grpc.StatusCode.UNAVAILABLE, error.details()
        assert isinstance(from_rpc_error(error), Unavailable)


def rpc_error(call: Callable[[], object]) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as failed:
        call()
    return failed.value


def test_the_daemon_serves_alignment_without_importing_spark_or_the_plugin() -> None:
    probe = (
        "import sys, epochstate.daemon.runtime, epochstate.daemon.server.alignment_admin\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('pyspark', 'confluent_kafka')"
        " or m.startswith('epochstate.spark_plugin')))"
    )
    command = [sys.executable, "-c", probe]
    loaded = subprocess.run(command, capture_output=True, text=True, check=True)
    assert loaded.stdout.strip() == "[]"
