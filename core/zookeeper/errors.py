"""Errors of the ZooKeeper registry."""

from epochstate.core import reasons
from epochstate.core.errors import EpochStateError


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
