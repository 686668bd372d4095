"""Errors of the store layer."""

from epochstate.core.errors import EpochStateError


class StoreError(EpochStateError):
    """Root of the store layer's errors."""


class StoreClosed(StoreError):
    pass


class UnknownJob(StoreError):
    pass


class LayoutMismatch(StoreError):
    """The store on disk was written with another layout version than this daemon's."""
