"""Where the listener's reports go (``spark_plugin.delivery``), against real gRPC servers on
loopback that answer as daemons would: the home daemon, then every located replica."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent import futures
from dataclasses import dataclass, field

import grpc
import pytest

from epochstate.client.tls import TlsOptions
from epochstate.spark_plugin.delivery import RETRY_SECONDS, ReportDelivery
from epochstate.v1 import epochstate_pb2 as pb


@dataclass
class Daemon:
    """A daemon's answers: ``follows`` the job or not; ``replicas`` what its Locate lists."""

    node: str
    follows: bool = True
    replicas: list[tuple[str, str]] = field(default_factory=list)
    reports: list[pb.ReportEpochRequest] = field(default_factory=list)
    address: str = ""

    def ReportEpoch(
        self, request: pb.ReportEpochRequest, context: grpc.ServicerContext
    ) -> pb.ReportEpochResponse:
        if not self.follows and not request.checkpoint:
            context.abort(grpc.StatusCode.NOT_FOUND, "no such job")
        self.reports.append(request)
        return pb.ReportEpochResponse(ingested_epoch=-1)

    def Locate(self, request: pb.LocateRequest, context: grpc.ServicerContext) -> pb.LocateResponse:
        if not self.replicas:
            context.abort(grpc.StatusCode.NOT_FOUND, "not assigned")
        shard = pb.LocatedShard(
            replicas=[pb.LocatedReplica(node=n, address=a, serving=True) for n, a in self.replicas]
        )
        return pb.LocateResponse(job=request.job, node=self.node, shards=[shard])


def serve(daemon: Daemon) -> grpc.Server:
    """``daemon``'s ReportEpoch and Locate on a real gRPC server on loopback (its ``address``)."""
    server = grpc.server(futures.ThreadPoolExecutor(4))
    report = grpc.unary_unary_rpc_method_handler(
        daemon.ReportEpoch, pb.ReportEpochRequest.FromString, pb.ReportEpochResponse.SerializeToString
    )
    locate = grpc.unary_unary_rpc_method_handler(
        daemon.Locate, pb.LocateRequest.FromString, pb.LocateResponse.SerializeToString
    )
    server.add_generic_rpc_handlers(
        (
            grpc.method_handlers_generic_handler("epochstate.v1.EpochState", {"ReportEpoch": report}),
            grpc.method_handlers_generic_handler("epochstate.v1.Routing", {"Locate": locate}),
        )
    )
    daemon.address = f"127.0.0.1:{server.add_insecure_port('127.0.0.1:0')}"
    server.start()
    return server


@pytest.fixture
def daemons() -> Iterator[dict[str, Daemon]]:
    found = {node: Daemon(node) for node in ("home", "b", "c")}
    servers = [serve(daemon) for daemon in found.values()]
    yield found
    for server in servers:
        server.stop(None)


def _report(epoch: int) -> pb.ReportEpochRequest:
    request = pb.ReportEpochRequest(job="orders", epoch=epoch, checkpoint="/cp/orders")
    request.placement.replicas = 2
    return request


def test_each_report_reaches_the_home_daemon_and_every_located_replica(daemons: dict[str, Daemon]) -> None:
    home, b, c = daemons["home"], daemons["b"], daemons["c"]
    home.follows = False  # a member that only defines the job
    now = [0.0]
    delivery = ReportDelivery(["127.0.0.1:9", home.address], TlsOptions(), timeout=2.0, clock=lambda: now[0])
    try:
        # Not assigned yet: the home daemon (after the dead first target) has it, nobody else.
        done = delivery.deliver(_report(0))
        assert (done.home, done.replicas) == (True, 0)
        assert home.reports[-1].checkpoint == "/cp/orders" and home.reports[-1].placement.replicas == 2

        # Assigned to b and to the home daemon itself (listed under another address): b only.
        home.replicas = [("b", b.address), ("home", "10.0.0.1:7070")]
        now[0] += RETRY_SECONDS / 2  # not asked again yet
        assert delivery.deliver(_report(1)).replicas == 0 and b.reports == []
        now[0] += RETRY_SECONDS
        done = delivery.deliver(_report(2))
        assert (done.home, done.replicas) == (True, 1)
        assert [(r.epoch, r.checkpoint, r.HasField("placement")) for r in b.reports] == [(2, "", False)]

        # The group moved the replica to c: b says it does not follow the job; the same
        # report is located again at once and reaches c.
        b.follows = False
        home.replicas = [("c", c.address)]
        done = delivery.deliver(_report(3))
        assert done.replicas == 1 and [r.epoch for r in c.reports] == [3]
        assert [r.epoch for r in b.reports] == [2]
    finally:
        delivery.close()


def test_a_refused_report_goes_to_no_replica(daemons: dict[str, Daemon]) -> None:
    home, b = daemons["home"], daemons["b"]
    home.replicas = [("b", b.address)]

    class Refusing(Daemon):
        def ReportEpoch(
            self, request: pb.ReportEpochRequest, context: grpc.ServicerContext
        ) -> pb.ReportEpochResponse:
            context.abort(grpc.StatusCode.ALREADY_EXISTS, "defined with another checkpoint")

    refusing = Refusing("home", replicas=[("b", b.address)])
    server = serve(refusing)
    delivery = ReportDelivery([refusing.address], TlsOptions(), timeout=2.0)
    try:
        done = delivery.deliver(_report(0))
        assert (done.home, done.replicas, done.refused) == (False, 0, "ALREADY_EXISTS")
        assert not done.anywhere and b.reports == []
    finally:
        delivery.close()
        server.stop(None)


def test_until_the_job_is_located_on_enough_daemons_reports_go_to_every_target(
    daemons: dict[str, Daemon],
) -> None:
    """A group still assigning the job (Locate says not found, or names fewer daemons than
    the placement's replicas): the other targets get the report too, so a replica that
    follows the job already sees the epoch at once rather than at its next poll."""
    home, b, c = daemons["home"], daemons["b"], daemons["c"]
    c.follows = False
    now = [0.0]
    targets = [home.address, b.address, c.address]
    delivery = ReportDelivery(targets, TlsOptions(), timeout=2.0, clock=lambda: now[0])
    try:
        done = delivery.deliver(_report(0))  # not located at all
        assert (done.home, done.replicas) == (True, 1) and [r.epoch for r in b.reports] == [0]
        assert all(not r.checkpoint and not r.HasField("placement") for r in b.reports)

        # The home daemon answers about itself alone (one daemon; the placement asks two).
        home.replicas = [("home", home.address)]
        now[0] += RETRY_SECONDS
        assert delivery.deliver(_report(1)).replicas == 1 and [r.epoch for r in b.reports] == [0, 1]

        # Located on two daemons: only they get reports from now on, for RELOCATE_SECONDS.
        c.follows = True
        home.replicas = [("home", home.address), ("c", c.address)]
        now[0] += RETRY_SECONDS
        for epoch in (2, 3):
            assert delivery.deliver(_report(epoch)).replicas == 1
        assert [r.epoch for r in c.reports] == [2, 3] and [r.epoch for r in b.reports] == [0, 1]
    finally:
        delivery.close()
