"""What each member says of its replicas: ``<root>/groups/<group>/status/<node>`` (ephemeral).

::

    {"updated_at_ms", "replicas": {"<job>": {"state", "reason", "restart_generation",
                                             "newest_epoch", "committed_epoch",
                                             "lag_epochs", "lag_seconds"}}}

The member rewrites it when a replica's state changes, and while a replica lags
at most every ``group_status_interval`` seconds; it goes with the member's
session. It is not in the member znode: the leader watches that one, and
status changes must not wake the assignor. ``JobsStatus`` joins it with the
definitions, the assignment and the replica znodes (docs/groups.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, cast

from epochstate.core.zookeeper.errors import InvalidRecord
from epochstate.core.zookeeper.group_records import decode_object
from epochstate.core.zookeeper.records import encode

ReplicaStateName = Literal["following", "catching_up", "paused", "failed"]
REPLICA_STATES: tuple[ReplicaStateName, ...] = ("following", "catching_up", "paused", "failed")


@dataclass(frozen=True)
class ReplicaStatus:
    """One replica of a job on this member.

    ``state``: "following" (caught up and announced in the replica znode),
    "catching_up" (ingesting, not announced yet), "paused" (the job is paused:
    it serves what it holds), "failed" (``reason`` says why: the checkpoint
    cannot be read, an epoch keeps failing). ``newest_epoch`` is the newest
    epoch it serves (-1: none), ``committed_epoch`` the newest committed in the
    checkpoint as last seen (-1: none); the lag is their difference, and in
    seconds, how long the oldest epoch not ingested has been committed.
    """

    state: ReplicaStateName
    restart_generation: int = 0
    newest_epoch: int = -1
    committed_epoch: int = -1
    lag_epochs: int = 0
    lag_seconds: float = 0.0
    reason: str = ""

    def to_json(self) -> dict[str, Any]:
        return {
            "state": self.state,
            "reason": self.reason,
            "restart_generation": self.restart_generation,
            "newest_epoch": self.newest_epoch,
            "committed_epoch": self.committed_epoch,
            "lag_epochs": self.lag_epochs,
            "lag_seconds": round(self.lag_seconds, 3),
        }

    @classmethod
    def from_json(cls, value: Any) -> ReplicaStatus:
        if not isinstance(value, dict) or value.get("state") not in REPLICA_STATES:
            raise ValueError(f"not a replica status: {value!r}")
        return cls(
            cast(ReplicaStateName, value["state"]),
            int(value.get("restart_generation", 0)),
            int(value.get("newest_epoch", -1)),
            int(value.get("committed_epoch", -1)),
            int(value.get("lag_epochs", 0)),
            float(value.get("lag_seconds", 0.0)),
            str(value.get("reason", "")),
        )


@dataclass(frozen=True)
class MemberStatus:
    """Every replica a member holds, by job, as of ``updated_at_ms``."""

    updated_at_ms: int
    replicas: dict[str, ReplicaStatus]

    def encode(self) -> bytes:
        replicas = {job: status.to_json() for job, status in sorted(self.replicas.items())}
        return encode({"updated_at_ms": self.updated_at_ms, "replicas": replicas})

    @classmethod
    def decode(cls, data: bytes | None) -> MemberStatus:
        """The status in a status znode; InvalidRecord if it is not one."""
        record = decode_object(data, "member status")
        try:
            replicas = {str(job): ReplicaStatus.from_json(v) for job, v in record["replicas"].items()}
            return cls(int(record["updated_at_ms"]), replicas)
        except (KeyError, TypeError, ValueError, AttributeError) as error:
            raise InvalidRecord(f"not a member status: {error!r}") from error
