"""What a failed call carries over the wire, read the way any gRPC client reads it.

Plain ``grpc`` stubs and ``grpc_status.rpc_status.from_call`` against the real
daemon process, no epochstate client: each failure must carry the status code and,
in the status details, one ``google.rpc.ErrorInfo`` with domain ``epochstate.dev``
and the documented reason (``epochstate.core.reasons``). Then the Python client
and the CLI read the same failures through their reason table.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.rpc import error_details_pb2  # type: ignore[import-untyped]
from grpc_status import rpc_status
from kazoo.client import KazooClient
from typer.testing import CliRunner

from epochstate.cli.app import app
from epochstate.client import (
    EpochNotReady,
    EpochRetired,
    EpochStateClient,
    EpochStateClientError,
    JobNotFound,
    NoSuchEpoch,
)
from epochstate.core import reasons
from epochstate.core.alignment.subjects import SubjectRegistry
from epochstate.v1 import epochstate_pb2 as pb
from epochstate.v1 import epochstate_pb2_grpc as pb_grpc
from tests.e2e.test_reads import SCHEMA, counts, orders
from tests.fixtures.daemon import DaemonProcess
from tests.fixtures.streams import FileStream

RETAINED = 3


def failure(call: Callable[[], object]) -> tuple[grpc.StatusCode, error_details_pb2.ErrorInfo, str]:
    """The code, the one ErrorInfo and the message of the call's failure."""
    with pytest.raises(grpc.RpcError) as failed:
        call()
    error = failed.value
    assert isinstance(error, grpc.Call)
    status = rpc_status.from_call(error)
    assert status is not None, f"no google.rpc.Status in the details of {error.code()}: {error.details()}"
    (detail,) = status.details
    info = error_details_pb2.ErrorInfo()
    assert detail.Unpack(info), detail.type_url
    return error.code(), info, error.details() or ""


def expect(
    call: Callable[[], object], code: grpc.StatusCode, reason: str, text: str
) -> error_details_pb2.ErrorInfo:
    got, info, message = failure(call)
    assert (got, info.reason, info.domain) == (code, reason, "epochstate.dev"), message
    assert reasons.REASONS[reason].code == code.name
    assert text in message, message
    return info


@pytest.fixture
def shop(
    spark: Any, tmp_path: Path, daemon_factory: Callable[..., DaemonProcess]
) -> Iterator[tuple[int, str]]:
    """A job with 6 epochs on a daemon (without ZooKeeper) that retains 3: newest epoch, target."""
    stream = FileStream(spark, tmp_path / "in", tmp_path / "cp", counts, SCHEMA, name="shop").start()
    daemon = daemon_factory(
        {"shop": str(tmp_path / "cp")}, extra_args=["--retention-epochs", str(RETAINED)], wait=False
    )
    try:
        for batch in range(6):
            stream.feed(orders(batch))
        newest = stream.committed()[-1]
        daemon.wait_for_epoch("shop", newest)
        yield newest, daemon.target
    finally:
        stream.stop()


def get(store: pb.StoreRef, key: pb.Row, epoch: pb.EpochSelector) -> pb.GetRequest:
    return pb.GetRequest(store=store, key=key, epoch=epoch)


def test_reads_fail_with_documented_reasons(shop: tuple[int, str]) -> None:
    newest, target = shop
    job = pb.StoreRef(job="shop", operator_id=0)
    u1 = pb.Row(fields=[pb.Value(string="u1")])
    with grpc.insecure_channel(target) as channel:
        stub = pb_grpc.EpochStateStub(channel)
        latest = pb.EpochSelector(latest=True)
        unknown = expect(
            lambda: stub.Get(get(pb.StoreRef(job="nope"), u1, latest), timeout=10),
            grpc.StatusCode.NOT_FOUND,
            reasons.JOB_NOT_FOUND,
            "unknown job 'nope'",
        )
        assert dict(unknown.metadata) == {"job": "nope"}
        # A long name: message and metadata are cut so the trailers fit a client's limit.
        long_name = expect(
            lambda: stub.Get(get(pb.StoreRef(job="j" * 20_000), u1, latest), timeout=10),
            grpc.StatusCode.NOT_FOUND,
            reasons.JOB_NOT_FOUND,
            "unknown job 'jjj",
        )
        assert long_name.metadata["job"].startswith("jjj")
        no_store = expect(
            lambda: stub.Get(get(pb.StoreRef(job="shop", operator_id=7), u1, latest), timeout=10),
            grpc.StatusCode.NOT_FOUND,
            reasons.STORE_NOT_FOUND,
            "no store 7/default",
        )
        assert dict(no_store.metadata) == {"job": "shop", "operatorId": "7", "store": "default"}
        expect(
            lambda: stub.Get(get(job, pb.Row(fields=[pb.Value(int=1)]), latest), timeout=10),
            grpc.StatusCode.INVALID_ARGUMENT,
            reasons.BAD_KEY,
            "expected string",
        )
        expect(
            lambda: stub.Get(get(job, u1, pb.EpochSelector(exact=-1)), timeout=10),
            grpc.StatusCode.INVALID_ARGUMENT,
            reasons.BAD_SELECTOR,
            ">= 0",
        )
        expect(
            lambda: stub.Scan(pb.ScanRequest(store=job, page_token=b"\x01"), timeout=10),
            grpc.StatusCode.INVALID_ARGUMENT,
            reasons.BAD_REQUEST,
            "page_token",
        )
        current = stub.ListJobs(pb.ListJobsRequest(), timeout=10).jobs[0].query_id
        other_query = pb.StoreRef(job="shop", query_id="an-older-query")
        changed = expect(
            lambda: stub.Get(get(other_query, u1, latest), timeout=10),
            grpc.StatusCode.FAILED_PRECONDITION,
            reasons.INCARNATION_CHANGED,
            "pinned to query an-older-query",
        )
        assert dict(changed.metadata) == {
            "job": "shop",
            "requestedQueryId": "an-older-query",
            "currentQueryId": current,
        }
        assert (
            stub.Get(get(pb.StoreRef(job="shop", query_id=current), u1, latest), timeout=10).query_id
            == current
        )
        not_ready = expect(
            lambda: stub.Get(get(job, u1, pb.EpochSelector(exact=newest + 5)), timeout=10),
            grpc.StatusCode.FAILED_PRECONDITION,
            reasons.EPOCH_NOT_READY,
            "has not committed yet",
        )
        metadata = dict(not_ready.metadata)
        assert 0 < int(metadata.pop("oldestEpoch")) <= newest, metadata
        assert metadata == {"job": "shop", "epoch": str(newest + 5), "newestEpoch": str(newest)}
        expect(
            lambda: stub.Get(get(job, u1, pb.EpochSelector(exact=newest + 5, wait=True)), timeout=2),
            grpc.StatusCode.DEADLINE_EXCEEDED,
            reasons.EPOCH_WAIT_TIMED_OUT,
            "before the deadline",
        )
        retired = expect(
            lambda: stub.Get(get(job, u1, pb.EpochSelector(exact=0)), timeout=10),
            grpc.StatusCode.OUT_OF_RANGE,
            reasons.EPOCH_RETIRED,
            "older than retention",
        )
        metadata = dict(retired.metadata)
        assert 0 < int(metadata.pop("oldestEpoch")) <= newest, metadata
        assert metadata == {"job": "shop", "epoch": "0", "newestEpoch": str(newest)}
        aligned = pb.EpochSelector(aligned_with=pb.AlignedWith(job="other", epoch=0))
        expect(
            lambda: stub.MultiGet(pb.MultiGetRequest(store=job, keys=[u1], epoch=aligned), timeout=10),
            grpc.StatusCode.FAILED_PRECONDITION,
            reasons.NO_SUCH_EPOCH,
            "without ZooKeeper",
        )
        # A stream fails the same way before its first message.
        expect(
            lambda: list(stub.WatchEpochs(pb.WatchEpochsRequest(job="nope"), timeout=10)),
            grpc.StatusCode.NOT_FOUND,
            reasons.JOB_NOT_FOUND,
            "unknown job 'nope'",
        )
        # The daemon keeps serving, and the old class-name trailer is gone.
        answer, call = stub.Get.with_call(get(job, u1, latest), timeout=10)
        assert answer.record.found
        assert all(key != "epochstate-error" for key, _ in call.trailing_metadata() or ())


def test_the_client_and_the_cli_read_the_reason(shop: tuple[int, str]) -> None:
    newest, target = shop
    with EpochStateClient(target, timeout=10) as client:
        cases: list[tuple[type[EpochStateClientError], Callable[[], object], str]] = [
            (JobNotFound, lambda: client.get("nope", ["u1"]), reasons.JOB_NOT_FOUND),
            (JobNotFound, lambda: next(client.watch("nope")), reasons.JOB_NOT_FOUND),
            (EpochNotReady, lambda: client.get("shop", ["u1"], epoch=newest + 5), reasons.EPOCH_NOT_READY),
            (EpochRetired, lambda: client.get("shop", ["u1"], epoch=0), reasons.EPOCH_RETIRED),
            (
                NoSuchEpoch,
                lambda: client.get("shop", ["u1"], aligned_with=("other", 0)),
                reasons.NO_SUCH_EPOCH,
            ),
        ]
        for kind, call, reason in cases:
            with pytest.raises(kind) as caught:
                call()
            assert caught.value.reason == reason, caught.value
            if reason != reasons.NO_SUCH_EPOCH:
                assert caught.value.metadata["job"] in ("nope", "shop"), caught.value.metadata
            assert caught.value.code.name == reasons.REASONS[reason].code
    result = CliRunner().invoke(app, ["get", "nope", "u1", "--target", target])
    assert result.exit_code == 3, result.output
    (line,) = [text for text in result.output.splitlines() if text.strip()]
    assert "unknown job 'nope'" in line and f"[{reasons.JOB_NOT_FOUND}]" in line, line


def test_alignment_admin_fails_with_documented_reasons(
    zk_connect: str, zk_client: KazooClient, tmp_path: Path, daemon_factory: Callable[..., DaemonProcess]
) -> None:
    SubjectRegistry(zk_client).register_source("t", "reader", "unaligned")
    with_zookeeper = daemon_factory(
        {}, name="aligning", zookeeper=zk_connect, env={"EPOCHSTATE_NODE": "errors"}
    )
    without = daemon_factory({}, name="alone")
    with grpc.insecure_channel(with_zookeeper.target) as channel:
        admin = pb_grpc.AlignmentAdminStub(channel)
        expect(
            lambda: admin.Align(pb.AlignRequest(subject="t", job="reader", epoch=1), timeout=10),
            grpc.StatusCode.FAILED_PRECONDITION,
            reasons.COMMAND_REFUSED,
            "is unaligned",
        )
        expect(
            lambda: admin.Status(pb.AlignmentStatusRequest(subject="nothing-here"), timeout=10),
            grpc.StatusCode.NOT_FOUND,
            reasons.SUBJECT_NOT_FOUND,
            "no subject 'nothing-here'",
        )
        expect(
            lambda: admin.CatchUp(pb.AlignmentCommandRequest(subject="t", job="nobody"), timeout=10),
            grpc.StatusCode.NOT_FOUND,
            reasons.SOURCE_NOT_FOUND,
            "has no source 'nobody'",
        )
        expect(
            lambda: admin.Status(pb.AlignmentStatusRequest(subject="bad/name"), timeout=10),
            grpc.StatusCode.INVALID_ARGUMENT,
            reasons.BAD_REQUEST,
            "topic name",
        )
    with grpc.insecure_channel(without.target) as channel:
        expect(
            lambda: pb_grpc.AlignmentAdminStub(channel).Status(pb.AlignmentStatusRequest(), timeout=10),
            grpc.StatusCode.FAILED_PRECONDITION,
            reasons.NO_ZOOKEEPER,
            "without ZooKeeper",
        )
