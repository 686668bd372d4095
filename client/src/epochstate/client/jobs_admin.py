"""Client side of ``epochstate.v1.JobsAdmin``: ``EpochStateClient.group_jobs``.

Any member of the daemon's group answers (docs/groups.md). Errors as the rest of
the client (``epochstate.client.errors``), picked by the daemon's reason:
JobDefined when the group has a job of that name (JOB_DEFINED), JobNotDefined for
an unknown job (JOB_NOT_DEFINED), DefinitionChanged when ``expected_version`` is
stale (DEFINITION_CHANGED), NoGroup when the daemon is in no group (NO_GROUP),
CheckpointNotAllowed for a checkpoint outside its roots (CHECKPOINT_NOT_ALLOWED),
InvalidArgument for bad arguments (BAD_REQUEST), Unavailable when the daemon
cannot reach ZooKeeper (REGISTRY_UNAVAILABLE).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import grpc

from epochstate.v1 import epochstate_pb2 as pb
from epochstate.v1 import epochstate_pb2_grpc as pb_grpc

Call = Callable[[Any, Any, float | None], Any]


class JobsAdmin:
    """Defines and controls the jobs of a daemon's group; made by ``EpochStateClient``."""

    def __init__(self, channel: grpc.Channel, call: Call) -> None:
        self._stub = pb_grpc.JobsAdminStub(channel)
        self._call = call

    def add(
        self,
        name: str,
        checkpoint: str,
        *,
        replicas: int = 1,
        shards: int = 1,
        partitions: int = 0,
        timeout: float | None = None,
    ) -> pb.JobDefinition:
        """Define job ``name`` on ``checkpoint``, its Spark ``partitions`` split into
        ``shards`` ranges, each followed by ``replicas`` members; its definition.
        ``partitions`` 0: learned from the checkpoint's state metadata (the daemon
        refuses INVALID_ARGUMENT when there is none yet and ``shards`` > 1)."""
        request = pb.AddJobRequest(
            name=name, checkpoint=checkpoint, replicas=replicas, shards=shards, partitions=partitions
        )
        response: pb.JobChangeResponse = self._call(self._stub.AddJob, request, timeout)
        return response.job

    def remove(
        self, name: str, *, expected_version: int | None = None, timeout: float | None = None
    ) -> pb.JobDefinition:
        """Delete the definition (its replicas stop and drop their data); the definition it had."""
        return self._change(self._stub.RemoveJob, name, expected_version, timeout)

    def pause(
        self, name: str, *, expected_version: int | None = None, timeout: float | None = None
    ) -> pb.JobDefinition:
        """Stop ingesting (replicas keep serving what they hold); the new definition."""
        return self._change(self._stub.PauseJob, name, expected_version, timeout)

    def resume(
        self, name: str, *, expected_version: int | None = None, timeout: float | None = None
    ) -> pb.JobDefinition:
        return self._change(self._stub.ResumeJob, name, expected_version, timeout)

    def restart(
        self, name: str, *, expected_version: int | None = None, timeout: float | None = None
    ) -> pb.JobDefinition:
        """A new restart generation: each replica re-opens the job, keeping its store."""
        return self._change(self._stub.RestartJob, name, expected_version, timeout)

    def status(self, job: str = "", *, timeout: float | None = None) -> pb.JobsStatusResponse:
        """Every job of the group (or ``job``): definition and each replica's state and lag."""
        response: pb.JobsStatusResponse = self._call(
            self._stub.JobsStatus, pb.JobsStatusRequest(job=job), timeout
        )
        return response

    def _change(
        self, method: Any, name: str, expected: int | None, timeout: float | None
    ) -> pb.JobDefinition:
        request = pb.JobChangeRequest(name=name)
        if expected is not None:
            request.expected_version = expected
        response: pb.JobChangeResponse = self._call(method, request, timeout)
        return response.job
