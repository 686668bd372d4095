"""Errors of the ZooKeeper registry."""

from epochstate.core import reasons
from epochstate.core.errors import BadRequest, EpochStateError


class RegistryError(EpochStateError):
    """Root of the registry errors."""


class RegistryUnavailable(RegistryError):
    """ZooKeeper could not be reached in time; the call may be repeated."""

    reason = reasons.REGISTRY_UNAVAILABLE


class EpochConflict(RegistryError):
    """The epoch is already registered with a different record; epochs are write-once."""


class JobNotRegistered(RegistryError):
    pass


class InvalidName(RegistryError):
    pass


class InvalidRecord(RegistryError):
    reason = reasons.CORRUPT_REGISTRY_RECORD


class AuthConfigError(RegistryError):
    """The ZooKeeper credentials file is missing, unreadable or malformed."""


class AccessDenied(RegistryError):
    """ZooKeeper refused a request: the znode's ACL does not grant it to this identity.

    The component runs without the credentials the tree was secured with (or with
    others); see docs/zookeeper.md, "Authentication and ACLs".
    """


# -- the group (docs/zookeeper.md, "Groups") ------------------------------------


class InvalidDefinition(RegistryError, BadRequest):
    """A job definition asks for something impossible (no replicas, more shards than partitions)."""


class JobDefined(RegistryError):
    """The group already has a job of that name (remove it first, or change it)."""

    reason = reasons.JOB_DEFINED


class JobNotDefined(RegistryError):
    """The group has no job of that name."""

    reason = reasons.JOB_NOT_DEFINED


class DefinitionChanged(RegistryError):
    """The job definition changed since the version the caller read: read it again and decide."""

    reason = reasons.DEFINITION_CHANGED


class NotLeader(RegistryError):
    """This member no longer holds the group's leadership: its assignment write was refused."""


class AssignmentChanged(RegistryError):
    """The assignment znode changed since the version the leader read (another writer)."""


class MemberNameTaken(RegistryError):
    """The group's member znode of this node is held by another session.

    Usually this node's previous process, whose session ZooKeeper has not expired
    yet (it goes away within that session's timeout); otherwise two daemons run
    with the same node name.
    """


class JobNotAssigned(RegistryError):
    """The job is not assigned to this member (in the assignment it holds now)."""
