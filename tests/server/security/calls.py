"""Every rpc of both services, as one raw call each, and what became of it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import grpc

from epochstate.client.errors import error_info
from epochstate.v1 import epochstate_pb2 as pb


@dataclass(frozen=True)
class Rpc:
    path: str
    role: str
    request: Any
    streaming: bool = False
    also: tuple[str, ...] = ()  # other roles that may call it (the gate's ROLES_OF)

    def allows(self, role: str) -> bool:
        return role == self.role or role in self.also

    @property
    def name(self) -> str:
        return self.path.rsplit("/", 1)[1]


def every_rpc(followable: str) -> list[Rpc]:
    """One call of each method; ``followable`` is a checkpoint FollowJob may follow."""
    store = pb.StoreRef(job="orders")
    key = pb.Row(fields=[pb.Value(string="u1")])
    at = pb.EpochSelector(exact=1)
    state, admin = "/epochstate.v1.EpochState/", "/epochstate.v1.AlignmentAdmin/"
    jobs = "/epochstate.v1.JobsAdmin/"
    return [
        Rpc(state + "Get", "read", pb.GetRequest(store=store, key=key, epoch=at)),
        Rpc(state + "MultiGet", "read", pb.MultiGetRequest(store=store, keys=[key], epoch=at)),
        Rpc(state + "Scan", "read", pb.ScanRequest(store=store, epoch=at, limit=2)),
        Rpc(state + "ListJobs", "read", pb.ListJobsRequest()),
        Rpc(state + "DescribeJob", "read", pb.DescribeJobRequest(job="orders")),
        Rpc(state + "ListEpochs", "read", pb.ListEpochsRequest(job="orders")),
        Rpc(state + "WatchEpochs", "read", pb.WatchEpochsRequest(job="orders", after_epoch=0), True),
        Rpc(state + "History", "read", pb.HistoryRequest(store=store, key=key, from_epoch=0, to_epoch=1)),
        Rpc(state + "Changes", "read", pb.ChangesRequest(store=store, from_epoch=0, to_epoch=1), True),
        Rpc(state + "ReportEpoch", "report", pb.ReportEpochRequest(job="orders", epoch=1)),
        Rpc(state + "FollowJob", "admin", pb.FollowJobRequest(job="orders", checkpoint=followable)),
        Rpc(admin + "Status", "admin", pb.AlignmentStatusRequest()),
        Rpc(admin + "CatchUp", "admin", pb.AlignmentCommandRequest(subject="t", job="j")),
        Rpc(admin + "Align", "admin", pb.AlignRequest(subject="t", job="j", next=True)),
        Rpc(admin + "Abort", "admin", pb.AlignmentCommandRequest(subject="t", job="j")),
        Rpc(admin + "Prune", "admin", pb.PruneSubjectRequest(subject="t", dry_run=True)),
        Rpc(admin + "PlanSwap", "admin", pb.PlanSwapRequest(subject="t", from_job="j", to_job="k")),
        Rpc(admin + "SwapStatus", "admin", pb.SwapStatusRequest(subject="t")),
        Rpc(admin + "AbortSwap", "admin", pb.SwapStatusRequest(subject="t")),
        Rpc(jobs + "AddJob", "admin", pb.AddJobRequest(name="orders", checkpoint=followable)),
        Rpc(jobs + "RemoveJob", "admin", pb.JobChangeRequest(name="orders")),
        Rpc(jobs + "PauseJob", "admin", pb.JobChangeRequest(name="orders")),
        Rpc(jobs + "ResumeJob", "admin", pb.JobChangeRequest(name="orders")),
        Rpc(jobs + "RestartJob", "admin", pb.JobChangeRequest(name="orders")),
        Rpc(jobs + "JobsStatus", "admin", pb.JobsStatusRequest()),
        Rpc("/epochstate.v1.Routing/Locate", "read", pb.LocateRequest(job="orders"), also=("report",)),
    ]


@dataclass(frozen=True)
class Outcome:
    code: grpc.StatusCode
    reason: str

    def __str__(self) -> str:
        return f"{self.code.name}{f' {self.reason}' if self.reason else ''}"


def call(channel: grpc.Channel, rpc: Rpc, metadata: tuple[tuple[str, str], ...] = ()) -> Outcome:
    """The outcome of ``rpc`` on ``channel`` (a stream: of its first message)."""
    serialize: Callable[[Any], bytes] = type(rpc.request).SerializeToString
    try:
        if rpc.streaming:
            stream = channel.unary_stream(rpc.path, serialize, None)
            next(iter(stream(rpc.request, timeout=20, metadata=metadata)))
        else:
            channel.unary_unary(rpc.path, serialize, None)(rpc.request, timeout=20, metadata=metadata)
    except grpc.RpcError as error:
        info = error_info(error)
        return Outcome(error.code(), "" if info is None else info.reason)
    return Outcome(grpc.StatusCode.OK, "")


AUTH_CODES = frozenset(
    {grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.PERMISSION_DENIED, grpc.StatusCode.UNAVAILABLE}
)
"""Codes of a call the daemon did not let through (UNAVAILABLE: the TLS handshake failed)."""
