"""A Spark listener's report defines its job in the daemon's group.

A report that names a checkpoint, sent to a daemon of a group, makes sure the
group has the job: when the group has no job of that name, the daemon defines it
in ZooKeeper exactly as ``JobsAdmin.AddJob`` would (the same job name rules, the
same ``auth.checkpoint_roots`` check, the same znode with the same ACLs), placed
as the report says; the group's leader then assigns its replicas. A report never
changes a defined job: the same checkpoint is fine (whatever placement the report
carries: an admin may have changed it since), another checkpoint is refused with
JOB_DEFINED (ALREADY_EXISTS) and nothing changes. So the ``report`` role can
create a group job, never change, pause or remove one.

A job the daemon follows although the group does not define it (a job of its own
config) stays as it is: the report only tells the daemon to look for the epoch.
"""

from __future__ import annotations

from kazoo.client import KazooClient

from epochstate.core.storage.location import redact
from epochstate.core.zookeeper.errors import JobDefined, JobNotDefined, RegistryUnavailable
from epochstate.core.zookeeper.layout import Layout
from epochstate.core.zookeeper.session import CONNECTION_ERRORS
from epochstate.daemon.group.definitions import JobDefinitions
from epochstate.daemon.server.new_jobs import CheckpointRoots, allowed_checkpoint, job_name, placement
from epochstate.v1 import epochstate_pb2 as pb


class ReportedJobs:
    """Defines the jobs that reports name in group ``group`` (under ``root``), through ``client``.

    ``roots``: the checkpoints a caller may name (None: any, as for AddJob). Each
    call waits on ZooKeeper at most ``timeout`` seconds.
    """

    def __init__(
        self,
        client: KazooClient,
        root: str,
        group: str,
        roots: CheckpointRoots | None,
        timeout: float = 5.0,
    ) -> None:
        self._client = client
        self._layout = Layout(root)
        self._group = group
        self._roots = roots
        self._timeout = timeout

    def ensure(self, request: pb.ReportEpochRequest, *, followed: bool, timeout: float | None = None) -> bool:
        """Make sure the group defines ``request.job`` with ``request.checkpoint``; whether
        this call defined it. ``followed``: this daemon follows a job of that name already
        (then a job the group does not define is left alone).

        Raises:
            JobDefined: the group defines the job with another checkpoint (nothing changed).
            BadRequest: not a job name, credentials in the checkpoint URI, an impossible placement.
            CheckpointNotAllowed: the checkpoint is outside ``auth.checkpoint_roots``.
            RegistryUnavailable: ZooKeeper did not answer in time (the job may or may not
                be defined: the next report finds out).
        """
        try:
            budget = self._timeout if timeout is None else max(0.001, min(self._timeout, timeout))
            return self._ensure(request, followed, budget)
        except CONNECTION_ERRORS as error:
            raise RegistryUnavailable(f"ZooKeeper did not answer: {error!r}") from error

    def _ensure(self, request: pb.ReportEpochRequest, followed: bool, timeout: float) -> bool:
        name = job_name(request.job)
        checkpoint = request.checkpoint
        definitions = JobDefinitions(self._client, self._layout, self._group, timeout=timeout)
        try:
            self._same(definitions, name, checkpoint)
            return False
        except JobNotDefined:
            if followed:
                return False
        # Checked before anything is written, as AddJob checks them.
        allowed_checkpoint(checkpoint, self._roots)
        wanted = request.placement
        placed = placement(checkpoint, wanted.replicas, wanted.shards, wanted.partitions)
        try:
            definitions.add(
                name, checkpoint, replicas=placed.replicas, shards=placed.shards, partitions=placed.partitions
            )
        except JobDefined:  # another report (or an admin) came first: the same check
            self._same(definitions, name, checkpoint)
            return False
        return True

    def _same(self, definitions: JobDefinitions, name: str, checkpoint: str) -> None:
        defined = definitions.get(name)[0].checkpoint
        if defined != checkpoint:
            raise JobDefined(
                f"group {self._group!r} defines job {name!r} with checkpoint {redact(defined)}, not "
                f"{redact(checkpoint)}: a report never changes a defined job (JobsAdmin changes it)",
                metadata={"job": name},
            )
