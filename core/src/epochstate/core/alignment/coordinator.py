"""The alignment coordinator (van Kaam §5.6): commands sources of a subject, reads their reports.

A recipe on the source znodes, ``<root>/subjects/<topic>/sources/<job>``: a
command is written by compare-and-set on the znode's version (the source's own
writes in between are kept), the source learns of it through a watch, and its
answer comes back in the same znode. The coordinator keeps no state of its own:
any process may issue commands, one after the other.

Rules: CatchUp applies to a source that is not aligned or aligning (Abort it
first); Align needs a source that reported Ready; Abort applies always.

A command is addressed to the reading query the source record names; once the
job's checkpoint is recreated, the new query's source starts a fresh record and
the old command is void: not carried out, not awaited (issue it again).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace

from epochstate.core.alignment.boundaries import Boundaries
from epochstate.core.alignment.commands import DONE, Command, CommandName, Report, State
from epochstate.core.alignment.errors import (
    InvalidTransition,
    NotAnswered,
    SourceNotFound,
    SubjectNotFound,
)
from epochstate.core.alignment.records import SourceRecord
from epochstate.core.alignment.subjects import SubjectRegistry, wall_clock_ms


@dataclass(frozen=True)
class SourceStatus:
    """One source of a subject as the coordinator sees it."""

    job: str
    record: SourceRecord

    @property
    def state(self) -> State:
        """The reported state (a source that never reported: its mode)."""
        report = self.record.report
        return self.record.mode if report is None else report.state

    @property
    def answered(self) -> bool:
        """Whether the source has seen its newest command (True when there is none, or when
        it was addressed to a query the job no longer runs: void, nobody will answer it)."""
        command, report = self.record.live_command, self.record.report
        return command is None or (report is not None and report.answers == command.id)


class AlignmentCoordinator:
    """Issues CatchUp, Align and Abort to the sources of subjects in ``registry``.

    Errors: SubjectNotFound, SourceNotFound (unknown names), InvalidTransition
    (a command the source's state does not allow), NotAnswered (waiting timed
    out), RegistryUnavailable (ZooKeeper did not answer).
    """

    def __init__(self, registry: SubjectRegistry, clock: Callable[[], int] = wall_clock_ms) -> None:
        self.registry = registry
        self._clock = clock

    def require_subject(self, topic: str) -> None:
        """Raise SubjectNotFound unless subject ``topic`` was ever registered."""
        if not self.registry.exists(topic):
            raise SubjectNotFound(f"no subject {topic!r}: no epoch or source was ever registered")

    def status(self, topic: str) -> list[SourceStatus]:
        """Every source of subject ``topic``, by job name."""
        self.require_subject(topic)
        found = []
        for job in self.registry.sources(topic):
            record = self.registry.get_source(topic, job)
            if record is not None:
                found.append(SourceStatus(job, record))
        return found

    def source(self, topic: str, job: str) -> SourceStatus:
        record = self.registry.get_source(topic, job)
        if record is None:
            raise SourceNotFound(f"subject {topic!r} has no source {job!r}")
        return SourceStatus(job, record)

    def catch_up(self, topic: str, job: str) -> Command:
        """Tell the source to report Ready once it has passed the second-to-last subject epoch."""

        def check(status: SourceStatus) -> int | None:
            if status.state in ("aligned", "aligning"):
                raise InvalidTransition(f"source {job!r} of {topic!r} is {status.state}: abort it first")
            return None

        return self._issue(topic, job, "catch-up", check)

    def align(self, topic: str, job: str, epoch: int | None = None) -> Command:
        """Tell a Ready source to read aligned from subject epoch ``epoch`` on.

        Without ``epoch``: the first epoch the source's reported position has not
        passed. InvalidTransition when the source is not Ready or has passed ``epoch``.
        """
        boundaries = Boundaries(self.registry, topic)

        def check(status: SourceStatus) -> int | None:
            report = status.record.report
            if report is None or report.state != "ready" or not status.answered:
                raise InvalidTransition(
                    f"source {job!r} of {topic!r} is {status.state}"
                    f"{'' if status.answered else ' (its newest command is not answered yet)'}: "
                    "align needs a source that reported ready to catch-up"
                )
            if epoch is None:
                return boundaries.first_not_passed(report.position)
            passed = boundaries.retired(epoch) or boundaries.passed(report.position, epoch)
            if passed is not None:
                raise InvalidTransition(f"source {job!r} cannot align at subject epoch {epoch}: {passed}")
            return epoch

        return self._issue(topic, job, "align", check)

    def abort(self, topic: str, job: str) -> Command:
        """Tell the source to read unaligned from where its newest batch ended."""
        return self._issue(topic, job, "abort", lambda _: None)

    def wait(self, topic: str, job: str, command: Command, timeout: float) -> Report:
        """The source's report once it did what ``command`` asked, or refused it.

        Raises NotAnswered after ``timeout`` seconds (a stopped query answers when
        it runs again), SourceNotFound when the source's znode goes away.
        """
        deadline = time.monotonic() + timeout
        changed = threading.Event()
        while True:
            changed.clear()
            record = self.registry.get_source(topic, job, watch=lambda _: changed.set())
            if record is None:
                raise SourceNotFound(f"subject {topic!r} has no source {job!r}")
            report = record.report
            answered = report is not None and report.answers == command.id
            if answered and report is not None and (report.state == DONE[command.name] or report.refused):
                return report
            if record.command is not None and record.command.id != command.id:
                raise InvalidTransition(f"command {command} was replaced by {record.command}")
            if record.query_id != command.query_id:
                raise InvalidTransition(
                    f"command {command} was addressed to query {command.query_id} of job {job!r}, but "
                    f"its checkpoint was recreated and query {record.query_id} reads {topic!r} now: "
                    "the new query does not carry it out; issue it again"
                )
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not changed.wait(remaining):
                state = "no report" if report is None else report.state
                raise NotAnswered(
                    f"source {job!r} of {topic!r} did not carry out {command} within {timeout:g} s "
                    f"({state}); is its query running?"
                )

    def _issue(
        self, topic: str, job: str, name: CommandName, check: Callable[[SourceStatus], int | None]
    ) -> Command:
        issued: list[Command] = []

        def change(record: SourceRecord) -> SourceRecord:
            epoch = check(SourceStatus(job, record))  # again on each try: the source may have moved
            previous = 0 if record.command is None else record.command.id
            command = Command(name, previous + 1, epoch, self._clock(), record.query_id)
            issued[:] = [command]
            return replace(record, command=command)

        self.registry.update_source(topic, job, change)
        return issued[0]
