"""Plans, shows and aborts hot-swaps (``epochstate swap``, ``AlignmentAdmin.PlanSwap``).

The coordinator keeps no state of its own and takes no part in the commit: it
writes the plan, and the jobs' sinks prepare and commit it (``participant``).
Any process may plan, read or abort, one after the other.

Checks of a plan, each refused with its own reason:

- SubjectNotFound: the output subject was never written;
- JobsNotAligned: the jobs read no input subject both aligned (their source
  records' mode), or the old job is not the writer of the output's newest epoch;
- SwapEpochPassed: the swap epoch leaves a job no epoch to prepare in: either job
  has read the prepare epoch ``S - 2`` already. The default epoch is the earliest
  one both can still agree on: ``S = newest epoch either has read + 1 + 2``;
- SwapInFlight: the subject's newest swap is not done or aborted yet;
- NewTooFarBehind (from :meth:`SwapCoordinator.wait`): the new job did not prepare
  before the swap's deadline, and the swap was aborted.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from epochstate.core.alignment.errors import InvalidOption, SubjectNotFound
from epochstate.core.alignment.layout import check_job, check_topic
from epochstate.core.alignment.records import SourceRecord
from epochstate.core.alignment.subjects import SubjectRegistry, wall_clock_ms
from epochstate.core.swap.errors import (
    JobsNotAligned,
    NewTooFarBehind,
    SwapAborted,
    SwapCommitted,
    SwapEpochPassed,
    SwapNotFound,
)
from epochstate.core.swap.participant import expire
from epochstate.core.swap.records import BY_REQUEST, NEW_BEHIND, PREPARE_LEAD, PREPARE_MISSED, SwapRecord
from epochstate.core.swap.registry import SwapRegistry

DEFAULT_DEADLINE = 60.0  # seconds for both jobs to prepare
MAX_DEADLINE = 7 * 24 * 3600.0


def _newest_read(record: SourceRecord) -> int:
    """The newest subject epoch a source has read (-1: none it still knows of)."""
    reported = record.report.subject_epoch if record.report is not None else None
    return max(max(record.mapping.values(), default=-1), -1 if reported is None else reported)


class SwapCoordinator:
    """Plans, reads and aborts the swaps of the output subjects in ``subjects``' tree."""

    def __init__(
        self, subjects: SubjectRegistry, swaps: SwapRegistry, clock: Callable[[], int] = wall_clock_ms
    ) -> None:
        self.subjects = subjects
        self.swaps = swaps
        self._clock = clock

    def shared_input(self, old: str, new: str, input: str | None = None) -> tuple[str, int]:
        """The input subject both jobs read aligned, and the newest epoch of it either has read (-1: none).

        JobsNotAligned when there is none; InvalidOption when there are several and
        ``input`` names none of them.
        """
        candidates = [check_topic(input)] if input else self.subjects.subjects()
        found: dict[str, int] = {}
        for topic in candidates:
            records = [self.subjects.get_source(topic, job) for job in (old, new)]
            if all(r is not None and r.mode == "aligned" for r in records):
                found[topic] = max((_newest_read(r) for r in records if r is not None), default=-1)
        if not found:
            where = f"subject {input!r}" if input else "any subject"
            raise JobsNotAligned(f"jobs {old!r} and {new!r} do not both read {where} aligned")
        if len(found) > 1:
            raise InvalidOption(f"jobs {old!r} and {new!r} read {sorted(found)} aligned: name the input")
        return next(iter(found.items()))

    def plan(
        self,
        subject: str,
        old: str,
        new: str,
        epoch: int | None = None,
        *,
        input: str | None = None,
        deadline: float = DEFAULT_DEADLINE,
    ) -> SwapRecord:
        """Plan the swap of ``subject`` from ``old`` to ``new`` at input epoch ``epoch`` (None: the earliest).

        ``deadline``: seconds from now for both jobs to prepare; a swap still
        undecided then is aborted. Raises the refusals of the module's docstring.
        """
        check_topic(subject)
        check_job(old)
        check_job(new)
        if old == new:
            raise InvalidOption(f"a swap moves a subject between two jobs, not from {old!r} to itself")
        if not 0 < deadline <= MAX_DEADLINE:
            raise InvalidOption(f"the deadline is seconds in (0, {MAX_DEADLINE:g}], not {deadline:g}")
        if not self.subjects.exists(subject):
            raise SubjectNotFound(f"no subject {subject!r}: the old job has written nothing to it yet")
        topic, newest = self.shared_input(old, new, input)
        if topic == subject:
            raise JobsNotAligned(f"{subject!r} is the jobs' input, not an output")
        self._check_writer(subject, old)
        earliest = newest + 1 + PREPARE_LEAD
        if epoch is not None and epoch < earliest:
            raise SwapEpochPassed(
                f"swap epoch {epoch} of {topic!r} is too early: a job has read epoch {newest} already, "
                f"and both must still prepare in epoch {epoch - PREPARE_LEAD}; the earliest is {earliest}",
                metadata={"earliestEpoch": str(earliest)},
            )
        at = earliest if epoch is None else epoch
        now = self._clock()

        def plan(current: SwapRecord | None) -> SwapRecord:
            return SwapRecord(
                id=1 if current is None else current.id + 1,
                subject=subject,
                input=topic,
                old=old,
                new=new,
                epoch=at,
                state="planned",
                planned_at_ms=now,
                deadline_ms=now + int(deadline * 1000),
                updated_at_ms=now,
            )

        return self.swaps.create(subject, plan)

    def _check_writer(self, subject: str, old: str) -> None:
        epochs = self.subjects.epochs(subject)
        if not epochs:
            return
        newest = self.subjects.get_epoch(subject, epochs[-1])
        if newest is not None and newest.writer != old:
            raise JobsNotAligned(
                f"job {old!r} does not write subject {subject!r}: its newest epoch {newest.epoch} "
                f"was written by {newest.writer!r}"
            )

    def status(self, subject: str) -> SwapRecord:
        """The newest swap of ``subject``; one undecided past its deadline is aborted first."""
        if self.swaps.get(subject) is None:
            if not self.subjects.exists(subject):
                raise SubjectNotFound(f"no subject {subject!r}")
            raise SwapNotFound(f"no swap was ever planned on subject {subject!r}")
        return self.swaps.update(subject, lambda r: expire(r, self._clock(), "coordinator"))

    def abort(self, subject: str) -> SwapRecord:
        """Abort the swap of ``subject`` if it is not committed yet (aborting twice is no error).

        SwapCommitted once it is committed or done: it then completes.
        """

        def change(record: SwapRecord) -> SwapRecord:
            if record.state == "aborted":
                return record
            if not record.undecided:
                raise SwapCommitted(
                    f"swap {record.id} of {subject!r} is {record.state} in epoch {record.committed_epoch} "
                    f"of {record.committed_by!r}: it can no longer be aborted"
                )
            return record.with_aborted(BY_REQUEST, "aborted on request", "coordinator", self._clock())

        self.status(subject)  # SwapNotFound, SubjectNotFound
        return self.swaps.update(subject, change)

    def wait(self, subject: str, swap: int, timeout: float, *, until_done: bool = False) -> SwapRecord:
        """Swap ``swap`` of ``subject`` once committed (or done, with ``until_done``); raise if aborted.

        Raises NewTooFarBehind, SwapEpochPassed or SwapAborted after an abort,
        and returns the record as it stands when ``timeout`` passes first.
        """
        ends = time.monotonic() + timeout
        changed = threading.Event()
        while True:
            changed.clear()
            record = self.swaps.get(subject, watch=lambda _: changed.set())
            if record is None or record.id != swap:
                raise SwapNotFound(f"swap {swap} of {subject!r} was replaced")
            record = self.status(subject)
            if record.state == "aborted" and record.aborted is not None:
                kind = {NEW_BEHIND: NewTooFarBehind, PREPARE_MISSED: SwapEpochPassed}.get(
                    record.aborted.reason, SwapAborted
                )
                raise kind(f"swap {swap} of {subject!r} was aborted: {record.aborted.detail}")
            if record.state == "done" or (record.state == "committed" and not until_done):
                return record
            remaining = ends - time.monotonic()
            if remaining <= 0:
                return record
            if record.undecided:  # wake up at the deadline to abort it
                remaining = min(remaining, max(0.05, (record.deadline_ms - self._clock()) / 1000 + 0.01))
            changed.wait(min(remaining, MAX_DEADLINE))
