"""Errors of aliases, each under its own stable reason."""

from __future__ import annotations

from epochstate.core import reasons
from epochstate.core.errors import EpochStateError


class AliasError(EpochStateError):
    """Root of the errors of aliases."""


class AliasNotFound(AliasError):
    reason = reasons.ALIAS_NOT_FOUND


class AmbiguousName(AliasError):
    """A name that is both a job and an alias: jobs and aliases share one namespace."""

    reason = reasons.AMBIGUOUS_NAME


class BadAlias(AliasError):
    """An alias that cannot be defined as asked (its job reads no input aligned, a bad name)."""

    reason = reasons.BAD_REQUEST
