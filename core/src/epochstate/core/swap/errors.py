"""Errors of the hot-swap: each refusal under its own stable reason."""

from __future__ import annotations

from epochstate.core import reasons
from epochstate.core.alignment.errors import AlignmentError


class SwapError(AlignmentError):
    """Root of the hot-swap's errors."""


class SwapNotFound(SwapError):
    reason = reasons.SWAP_NOT_FOUND


class JobsNotAligned(SwapError):
    """The jobs share no input subject they both read aligned, or the old job does not write the output."""

    reason = reasons.JOBS_NOT_ALIGNED


class SwapEpochPassed(SwapError):
    """A job has read past the epoch in which it would have to prepare."""

    reason = reasons.SWAP_EPOCH_PASSED


class NewTooFarBehind(SwapError):
    """The new job did not reach the prepare epoch before the deadline: the swap was aborted."""

    reason = reasons.NEW_TOO_FAR_BEHIND


class SwapInFlight(SwapError):
    reason = reasons.SWAP_IN_FLIGHT


class SwapCommitted(SwapError):
    """The swap is committed: it can no longer be aborted."""

    reason = reasons.SWAP_COMMITTED


class SwapAborted(SwapError):
    """The swap was aborted (for a reason other than the new job being behind)."""

    reason = reasons.COMMAND_REFUSED
