"""A source that follows the alignment coordinator: unaligned, catching up, ready, aligning, aligned.

The source reads its newest command from its znode (woken by a ZooKeeper watch)
each time Spark asks for the latest offset, decides the next batch
(``protocol.decide``) and reports its state back into the znode (when the state
changes, and after each planned batch). Everything
it decides is recovered after a restart: the kind of the newest batch (aligned
or not) is in the query's offsets log, the command in ZooKeeper.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import replace

from kazoo.protocol.states import WatchedEvent

from epochstate.core.alignment.boundaries import Boundaries
from epochstate.core.alignment.commands import Command, Report
from epochstate.core.alignment.records import Mode, SourceRecord
from epochstate.core.alignment.subjects import SubjectRegistry, wall_clock_ms
from epochstate.spark_plugin.alignment.aligned import RECHECK_SECONDS, AlignedPlanner
from epochstate.spark_plugin.alignment.offsets import SubjectOffset
from epochstate.spark_plugin.alignment.options import SourceOptions
from epochstate.spark_plugin.alignment.partitions import SubjectPartition
from epochstate.spark_plugin.alignment.planned import PlannedOffsets
from epochstate.spark_plugin.alignment.protocol import Decision, decide
from epochstate.spark_plugin.alignment.unaligned import UnalignedPlanner
from epochstate.spark_plugin.kafka.admin import TopicAdmin

log = logging.getLogger(__name__)


class SourceZnode:
    """The source's record, read again only when ZooKeeper says it changed (or RECHECK_SECONDS passed).

    It is seen as query ``query_id``'s source must see it (``SourceRecord.for_query``):
    the report, mapping and command of another query (before the job's checkpoint
    was recreated) are not this query's, and its command is not live.
    """

    def __init__(
        self,
        registry: SubjectRegistry,
        topic: str,
        job: str,
        query_id: str | None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._registry = registry
        self._topic = topic
        self._job = job
        self._query_id = query_id
        self._clock = clock
        self._changed = threading.Event()
        self._changed.set()
        self._record: SourceRecord | None = None
        self._read_at = 0.0

    def get(self) -> SourceRecord | None:
        now = self._clock()
        if self._changed.is_set() or now - self._read_at >= RECHECK_SECONDS:
            self._changed.clear()
            self._read_at = now
            # A bound method, so that kazoo (which keeps watchers in a set) holds it once.
            found = self._registry.get_source(self._topic, self._job, watch=self._on_change)
            self._record = None if found is None else found.for_query(self._query_id, wall_clock_ms())
        return self._record

    def _on_change(self, _: WatchedEvent) -> None:
        self._changed.set()


class CoordinatedPlanner:
    """The offsets and partitions of a source that moves between unaligned and aligned on command.

    The option ``mode`` says how a new query starts; afterwards the newest
    command decides, and without one the source goes on as its newest batch
    read. Guarantees: every registered record of the subject after the
    starting point is read exactly once across the switches (the batch that
    switches to aligned ends exactly at the start of Align's epoch; Abort
    goes on unaligned from where the newest batch ended).
    """

    def __init__(
        self, options: SourceOptions, registry: SubjectRegistry, planned: PlannedOffsets, admin: TopicAdmin
    ) -> None:
        assert options.job is not None  # options.coordinated
        self.options = options
        self.topic = options.kafka.topic
        self.job = options.job
        self._registry = registry
        self._planned = planned
        self._boundaries = Boundaries(registry, self.topic)
        self._aligned = AlignedPlanner(options, registry, planned, self._boundaries)
        self._unaligned = UnalignedPlanner(options, admin, planned, None)
        self._znode = SourceZnode(registry, self.topic, self.job, self._aligned.query_id)
        self._decided: tuple[int | None, Command | None, Decision] | None = None
        self._reported: Report | None = None

    def initial(self) -> SubjectOffset:
        return self._aligned.initial() if self.options.mode == "aligned" else self._unaligned.initial()

    def latest(self) -> SubjectOffset:
        newest = self._planned.newest()
        batch, current = (None, self.initial()) if newest is None else newest
        record = self._znode.get()
        command = None if record is None else record.live_command
        decision = self._decide(batch, current, command, record)
        self._report(decision.report(current, batch, command), current)
        if decision.step == "aligned":
            return self._aligned.next_after(current)
        if decision.step == "unaligned":
            return self._unaligned.latest_from(current)
        if decision.step == "transition" and decision.end is not None:
            return decision.end
        return current

    def partitions(self, start: SubjectOffset, end: SubjectOffset) -> list[SubjectPartition]:
        """Aligned to aligned: the epochs' exact ranges; otherwise everything between the positions.

        The batch's offsets are in the query's log by now: the source reports
        where it stands after this batch before the batch runs.
        """
        if start.aligned and end.aligned:
            found = self._aligned.partitions(start, end)
        else:
            found = self._unaligned.partitions(start, end)
        newest = self._planned.newest()
        if newest is not None and newest[1] == end:
            record = self._znode.get()
            command = None if record is None else record.live_command
            decision = self._decide(newest[0], end, command, record)
            self._report(decision.report(end, newest[0], command), end)
        return found

    def commit(self, end: SubjectOffset) -> None:
        """Nothing to do: the mapping is recorded when a batch runs, the report when the next is planned."""

    def _decide(
        self, batch: int | None, current: SubjectOffset, command: Command | None, record: SourceRecord | None
    ) -> Decision:
        # A decision stands until the next batch or command, except waiting for the
        # epoch before Align's, which the watch on that epoch's znode ends.
        if self._decided is not None and self._decided[:2] == (batch, command):
            decision = self._decided[2]
            if decision.step != "hold" or command is None or command.epoch is None:
                return decision
            if self._aligned.registered(command.epoch - 1) is None:
                return decision
        previous = self._reported or (None if record is None else record.report)
        ready_before = (
            previous is not None
            and command is not None
            and previous.answers == command.id
            and previous.state == "ready"
        )
        decision = decide(current, command, self._boundaries, ready_before)
        self._decided = (batch, command, decision)
        return decision

    def _report(self, report: Report, current: SubjectOffset) -> None:
        if report == self._reported:
            return
        mode: Mode = "aligned" if current.aligned else "unaligned"
        now = wall_clock_ms()
        self._registry.update_source(
            self.topic,
            self.job,
            lambda record: replace(record, mode=mode, report=report, updated_at_ms=now),
            create_as=mode,
            query_id=self._aligned.query_id,
            adopt=self._planned.read,
        )
        if self._reported is None or self._reported.state != report.state:
            log.info(
                "source %r of subject %r: %s after batch %s%s",
                self.job,
                self.topic,
                report.state,
                report.batch,
                f" (refused: {report.refused})" if report.refused else "",
            )
        self._reported = report
