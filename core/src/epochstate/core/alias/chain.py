"""Which job answers which epochs of an alias: a pure function of the alias and its subject's swaps.

The alias's first job answers every input epoch; each swap of the output
subject from the job answering last to another, once committed (or done), hands
the epochs after its swap epoch ``S`` to the new job. Aborted swaps hand nothing
over. A swap still undecided (planned, prepared) leaves the epochs after ``S``
to nobody yet: a read of such an epoch waits, as for an epoch not committed
yet, and is never answered by the old job first and the new one later.

Stable answers: a swap's decision never goes back (``core.swap.records``), a
finished swap is kept (``swaps/<id>``) when the next one is planned, and the
alias record is never rewritten by a swap, so the job answering an epoch, once
known, is the same on every later resolution and on every daemon.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from epochstate.core.alias.records import AliasRecord
from epochstate.core.swap.records import SwapRecord


@dataclass(frozen=True)
class Segment:
    """Job ``job`` answers the input epochs ``after + 1 .. until`` (None: from the first; no end).

    ``swap`` is the id of the swap that gave it these epochs (None for the alias's
    first job), ``handover`` the output epoch the previous job registered last
    (None while that swap is not done, and for the first job).
    """

    job: str
    after: int | None = None
    until: int | None = None
    swap: int | None = None
    handover: int | None = None

    def holds(self, epoch: int) -> bool:
        return (self.after is None or epoch > self.after) and (self.until is None or epoch <= self.until)


@dataclass(frozen=True)
class AliasChain:
    """The jobs of an alias, oldest first, and the swap deciding the next one (``pending``)."""

    alias: AliasRecord
    segments: tuple[Segment, ...]
    pending: SwapRecord | None = None

    @property
    def current(self) -> Segment:
        """The segment of the newest job to answer (the one a pending swap would move from)."""
        return self.segments[-1]

    @property
    def decided_until(self) -> int | None:
        """The newest input epoch whose job is known; None: every epoch's (no swap undecided)."""
        return None if self.pending is None else self.pending.epoch

    def answering(self, epoch: int) -> Segment | None:
        """The segment answering input epoch ``epoch``; None while a swap has not decided it.

        A non-None answer for an epoch never changes.
        """
        if self.pending is not None and epoch > self.pending.epoch:
            return None
        return next(s for s in self.segments if s.holds(epoch))

    def segment_of(self, job: str) -> Segment | None:
        """The newest segment of ``job`` (a job may answer twice: swapped away and back)."""
        return next((s for s in reversed(self.segments) if s.job == job), None)


def chain_of(alias: AliasRecord, swaps: Iterable[SwapRecord]) -> AliasChain:
    """The chain of ``alias`` given every swap of its subject (past and newest, any order).

    A swap moves the alias when it moves the output from the job answering last
    (and is on the alias's input): committed or done, it adds the new job from
    its swap epoch on; undecided, it is the chain's ``pending``; aborted, nothing.
    """
    segments = [Segment(alias.job)]
    pending: SwapRecord | None = None
    for swap in sorted(swaps, key=lambda s: s.id):
        last = segments[-1]
        if swap.old != last.job or swap.input != alias.input or swap.state == "aborted":
            continue
        if last.after is not None and swap.epoch <= last.after:
            continue  # a swap the alias's input epochs passed already cannot move it back
        if swap.undecided:
            pending = swap
            break
        segments[-1] = Segment(last.job, last.after, swap.epoch, last.swap, last.handover)
        segments.append(Segment(swap.new, swap.epoch, None, swap.id, swap.handover))
    return AliasChain(alias, tuple(segments), pending)
