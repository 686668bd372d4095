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
