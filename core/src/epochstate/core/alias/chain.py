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
    first job). ``took_over`` is ``(S, handover)`` of the done swap that made the job
    the writer of the output: its output epoch ``o`` is then the output of input
    epoch ``S + o - handover``. None while that swap is not done, and for a first job
    that wrote the output from its start (its batch ``n`` wrote output epoch ``n``).
    """

    job: str
    after: int | None = None
    until: int | None = None
    swap: int | None = None
    took_over: tuple[int, int] | None = None

    def input_of_output(self, output: int) -> int | None:
        """The input epoch whose output is output epoch ``output``, when the job took the
        output over by a swap (None otherwise: its batch ``output`` wrote it)."""
        if self.took_over is None:
            return None
        swap_epoch, handover = self.took_over
        return swap_epoch + output - handover

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
    ordered = sorted(swaps, key=lambda s: s.id)
    segments = [Segment(alias.job, took_over=_taken_over(alias, ordered))]
    pending: SwapRecord | None = None
    for swap in ordered:
        last = segments[-1]
        if swap.old != last.job or swap.input != alias.input or swap.state == "aborted":
            continue
        if last.after is not None and swap.epoch <= last.after:
            continue  # a swap the alias's input epochs passed already cannot move it back
        if swap.undecided:
            pending = swap
            break
        segments[-1] = Segment(last.job, last.after, swap.epoch, last.swap, last.took_over)
        took_over = None if swap.handover is None else (swap.epoch, swap.handover)
        segments.append(Segment(swap.new, swap.epoch, None, swap.id, took_over))
    return AliasChain(alias, tuple(segments), pending)


def _taken_over(alias: AliasRecord, ordered: list[SwapRecord]) -> tuple[int, int] | None:
    """``(S, handover)`` of the newest done swap that made the alias's first job the writer
    before the alias's own swaps (an alias defined on a job that took the output over)."""
    found = None
    for swap in ordered:
        if swap.old == alias.job and swap.input == alias.input and swap.state != "aborted":
            break  # the alias's own swaps begin
        if swap.new == alias.job and swap.state == "done" and swap.handover is not None:
            found = (swap.epoch, swap.handover)
    return found
