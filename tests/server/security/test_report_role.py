"""The ``report`` role and a group: a Spark listener's identity may create a group
job under the allowed checkpoint roots, and never change, pause, restart or remove one."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import grpc
from kazoo.client import KazooClient

from epochstate.client.tls import TlsOptions, open_channel
from epochstate.core.zookeeper.layout import Layout
from epochstate.daemon.group.definitions import JobDefinitions
from epochstate.v1 import epochstate_pb2 as pb
from tests.fixtures.certs import Certificates
from tests.fixtures.daemon import DaemonProcess
from tests.fixtures.zookeeper import eventually
from tests.server.security.calls import Outcome, Rpc, call
from tests.server.security.conftest import token_files
from tests.server.security.test_authorization import _settings

GROUP = "secure"
STATE, JOBS = "/epochstate.v1.EpochState/", "/epochstate.v1.JobsAdmin/"


def test_the_report_role_creates_a_group_job_and_changes_none(
    certificates: Certificates,
    orders_checkpoint: Path,
    secure_daemon: Callable[..., DaemonProcess],
    zk_connect: str,
    make_zk_client: Callable[..., KazooClient],
    tmp_path: Path,
) -> None:
    certs = certificates
    files = token_files(tmp_path / "tokens")
    settings = _settings(certs, [str(orders_checkpoint.parent)], mutual=False, tokens=files)
    settings["zookeeper"] = zk_connect
    reader = TlsOptions(ca=certs.ca.pem_path, token_file=files["dashboards"])
    daemon = secure_daemon(settings, tls=reader, extra_args=["--group", GROUP, "--node", "s1"])
    definitions = JobDefinitions(make_zk_client(), Layout(), GROUP)

    def as_(identity: str, rpc: Rpc) -> Outcome:
        with open_channel(
            daemon.target, TlsOptions(ca=certs.ca.pem_path, token_file=files[identity])
        ) as channel:
            return call(channel, rpc)

    def report(job: str, checkpoint: str) -> Rpc:
        request = pb.ReportEpochRequest(job=job, epoch=1, checkpoint=checkpoint)
        request.placement.replicas = 1
        return Rpc(STATE + "ReportEpoch", "report", request)

    denied = grpc.StatusCode.PERMISSION_DENIED
    # Outside the checkpoint roots (also by way of ".."): refused, nothing defined.
    for outside in (str(tmp_path / "elsewhere"), f"{orders_checkpoint.parent}/../../etc"):
        assert as_("spark-listener", report("stray", outside)) == Outcome(denied, "CHECKPOINT_NOT_ALLOWED")
    assert definitions.list() == {}

    # Under the roots: the report defines the job; the group's leader (this daemon) assigns
    # it and the daemon follows it.
    assert as_("spark-listener", report("orders", str(orders_checkpoint))) == Outcome(grpc.StatusCode.OK, "")
    defined = definitions.get("orders")
    assert defined[0].checkpoint == str(orders_checkpoint) and defined[0].state == "running"
    daemon.wait_for_epoch("orders", 1, timeout=60)
    # The listener may locate the job's replicas (to push to each), and report again.
    locate = Rpc("/epochstate.v1.Routing/Locate", "read", pb.LocateRequest(job="orders"), also=("report",))
    assert eventually(lambda: as_("spark-listener", locate).code == grpc.StatusCode.OK, 60)
    assert as_("spark-listener", report("orders", str(orders_checkpoint))).code == grpc.StatusCode.OK

    # Another checkpoint under the same name: refused, the definition stays.
    another = report("orders", str(orders_checkpoint.parent / "another"))
    assert as_("spark-listener", another) == Outcome(grpc.StatusCode.ALREADY_EXISTS, "JOB_DEFINED")
    # No JobsAdmin call: not pause, resume, restart, remove, nor AddJob over it.
    change = pb.JobChangeRequest(name="orders")
    for method in ("PauseJob", "ResumeJob", "RestartJob", "RemoveJob"):
        outcome = as_("spark-listener", Rpc(JOBS + method, "admin", change))
        assert outcome == Outcome(denied, "ROLE_MISSING"), method
    add = pb.AddJobRequest(name="other", checkpoint=str(orders_checkpoint))
    assert as_("spark-listener", Rpc(JOBS + "AddJob", "admin", add)) == Outcome(denied, "ROLE_MISSING")
    assert definitions.get("orders") == defined
    assert set(definitions.list()) == {"orders"}

    # The admin still can.
    assert as_("ops", Rpc(JOBS + "PauseJob", "admin", change)).code == grpc.StatusCode.OK
    assert definitions.get("orders")[0].state == "paused"
