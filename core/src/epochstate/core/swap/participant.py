"""A job's side of the hot-swap: what its sink calls at each input epoch, and what it answers.

A job's sink calls :meth:`SwapParticipant.step` for each input epoch before it
registers that epoch's output, and does what the answer's turn says: ``write``
(register it), ``skip`` (register nothing; the rows it wrote are never read) or
``hold`` (do not finish the batch yet; step again shortly). Each step also moves
the protocol on, so no long-lived coordinator is needed:

- in the prepare epoch (``S - 2``), the job prepares; once both have, the swap is prepared;
- in any later epoch of either job, a prepared swap is committed;
- a job that reads past the prepare epoch unprepared aborts the swap (it learned
  of it too late), and anyone who sees an undecided swap past its deadline aborts it;
- once committed, the swap is done as soon as the old job's output of epoch ``S``
  is registered: reported by the old job (:meth:`wrote`), or found in ZooKeeper
  (its mapping names the batch that read ``S``, and that batch's output epoch is
  registered), so the new job finishes the swap even if the old one never returns.

Every step is one compare-and-set on the swap record and idempotent: a job that
dies anywhere and runs its batch again steps the same epoch again to the same end.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from epochstate.core.alignment.subjects import SubjectRegistry, wall_clock_ms
from epochstate.core.swap.records import (
    NEW_BEHIND,
    OLD_BEHIND,
    PREPARE_MISSED,
    SwapRecord,
    Turn,
    turn,
)
from epochstate.core.swap.registry import SwapRegistry


@dataclass(frozen=True)
class Step:
    """The answer to one step: the turn, the record after the step, and for the new
    job's writes the output subject epoch its output of the input epoch becomes."""

    turn: Turn
    record: SwapRecord
    output_epoch: int | None = None


def expire(record: SwapRecord, now_ms: int, by: str) -> SwapRecord:
    """``record`` aborted if it is undecided past its deadline, else ``record``."""
    if not record.undecided or now_ms <= record.deadline_ms:
        return record
    missing = record.new if record.new not in record.prepared else record.old
    reason = NEW_BEHIND if missing == record.new else OLD_BEHIND
    detail = (
        f"job {missing!r} had not prepared in epoch {record.prepare_epoch} of {record.input!r} "
        f"when the deadline passed"
    )
    return record.with_aborted(reason, detail, by, now_ms)


def advance(record: SwapRecord, job: str, epoch: int, now_ms: int) -> SwapRecord:
    """The record after ``job`` (old or new) reached input epoch ``epoch``: prepared, committed or aborted."""
    record = expire(record, now_ms, job)
    if not record.undecided or job not in (record.old, record.new):
        return record
    if job not in record.prepared:
        if epoch == record.prepare_epoch:
            record = record.with_prepared(job, now_ms)
        elif epoch > record.prepare_epoch:
            detail = f"job {job!r} read epoch {epoch} of {record.input!r}, past the prepare epoch, unprepared"
            return record.with_aborted(PREPARE_MISSED, detail, job, now_ms)
    if record.state == "prepared" and epoch > record.prepare_epoch:
        record = record.with_committed(job, epoch, now_ms)
    return record


class SwapParticipant:
    """Job ``job``'s steps in the swaps of output subject ``subject``.

    ``subjects`` reads the old job's mapping and the output's epochs to find the
    handover when the old job did not report it.
    """

    def __init__(
        self,
        swaps: SwapRegistry,
        subjects: SubjectRegistry,
        subject: str,
        job: str,
        clock: Callable[[], int] = wall_clock_ms,
    ) -> None:
        self.swaps = swaps
        self.subjects = subjects
        self.subject = subject
        self.job = job
        self._clock = clock

    def step(self, epoch: int) -> Step | None:
        """Move the swap on for input epoch ``epoch`` of this job; what to do with its output.

        None when the subject has no swap (the sink writes as it always did).
        """
        if self.swaps.get(self.subject) is None:
            return None
        record = self.swaps.update(self.subject, lambda r: advance(r, self.job, epoch, self._clock()))
        if record.state == "committed":
            handover = self._handover(record)
            if handover is not None:
                record = self._done(handover)
        return Step(turn(record, self.job, epoch), record, self._output_epoch(record, epoch))

    def wrote(self, epoch: int, output_epoch: int) -> SwapRecord | None:
        """Report that this job registered output epoch ``output_epoch`` for input epoch ``epoch``.

        The old job's output of the swap epoch ends a committed swap: done.
        """
        record = self.swaps.get(self.subject)
        if record is None or record.state != "committed" or (self.job, epoch) != (record.old, record.epoch):
            return record
        return self._done(output_epoch)

    def _done(self, handover: int) -> SwapRecord:
        now = self._clock()
        return self.swaps.update(
            self.subject, lambda r: r.with_done(handover, now) if r.state == "committed" else r
        )

    def _output_epoch(self, record: SwapRecord, epoch: int) -> int | None:
        """The output epoch of this job's input epoch ``epoch`` (None: the batch id, as without swaps).

        The new job's follow the swap's handover; the old job's follow the handover
        of the earlier swap in which it took the subject over, if it did.
        """
        if self.job == record.new:
            return record.output_epoch(epoch)
        if self.job != record.old:
            return None
        previous = self.took_over(record)
        return None if previous is None else previous.output_epoch(epoch)

    def took_over(self, record: SwapRecord) -> SwapRecord | None:
        """The earlier swap in which ``record``'s old job took the subject over (None: it wrote it first)."""
        previous = self.swaps.newest_done(record.subject)
        if previous is not None and previous.new == record.old and previous.input == record.input:
            return previous
        return None

    def _handover(self, record: SwapRecord) -> int | None:
        """The output epoch the old job registered for the swap epoch, if it did (from ZooKeeper).

        A job writes its batch ``n`` as output epoch ``n``, unless it took the subject
        over in an earlier swap: then its epochs follow that swap's handover.
        """
        previous = self.took_over(record)
        if previous is not None:
            output = previous.output_epoch(record.epoch)
        else:
            source = self.subjects.get_source(record.input, record.old)
            mapping = {} if source is None else source.mapping
            output = next((batch for batch, k in mapping.items() if k == record.epoch), None)
        if output is None:
            return None
        written = self.subjects.get_epoch(record.subject, output)
        return output if written is not None and written.writer == record.old else None
