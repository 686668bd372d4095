"""Aligned batches: each batch of the query reads exactly one subject epoch."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from kazoo.protocol.states import WatchedEvent

from epochstate.core.alignment.boundaries import Boundaries
from epochstate.core.alignment.records import SubjectEpoch
from epochstate.core.alignment.subjects import SubjectRegistry
from epochstate.spark_plugin.alignment.errors import AlignmentError
from epochstate.spark_plugin.alignment.offsets import SubjectOffset
from epochstate.spark_plugin.alignment.options import SourceOptions
from epochstate.spark_plugin.alignment.partitions import SubjectPartition
from epochstate.spark_plugin.alignment.planned import PlannedOffsets

log = logging.getLogger(__name__)

# A missed watch (a session that expired while waiting) delays a batch by at most this long.
RECHECK_SECONDS = 1.0


class NextEpoch:
    """Whether a subject epoch is registered, asking ZooKeeper only when there may be news.

    Spark asks for the latest offset every few milliseconds while nothing is new.
    After ZooKeeper said "not registered", the answer stands until the watch left
    on the znode fires or RECHECK_SECONDS pass.
    """

    def __init__(
        self, registry: SubjectRegistry, topic: str, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._registry = registry
        self._topic = topic
        self._clock = clock
        self._changed = threading.Event()
        self._missing: int | None = None  # the epoch ZooKeeper said is not registered yet
        self._asked_at = 0.0

    def get(self, epoch: int) -> SubjectEpoch | None:
        now = self._clock()
        if self._missing == epoch and not self._changed.is_set() and now - self._asked_at < RECHECK_SECONDS:
            return None
        self._changed.clear()
        self._asked_at = now
        # A bound method, so that kazoo (which keeps watchers in a set) holds it once.
        found = self._registry.get_epoch(self._topic, epoch, watch=self._on_change)
        self._missing = epoch if found is None else None
        return found

    def _on_change(self, _: WatchedEvent) -> None:
        self._changed.set()


class AlignedPlanner:
    """The aligned steps of a source: where reading aligned starts, the next epoch, its partitions.

    Invariants: an aligned batch that follows an aligned batch ends at the end of
    exactly one subject epoch more, and reads exactly that epoch's registered
    ranges; the mapping batch -> subject epoch is recorded under the source's
    znode as soon as Spark runs the batch (its offsets are in the query's log by
    then, so the mapping can no longer change; whether the batch committed is
    the query's own record). The mapping is this query's alone: a mapping that
    another query recorded (the job's checkpoint was recreated) is replaced,
    in the same compare-and-set, by one that starts with this query's batch.
    """

    def __init__(
        self,
        options: SourceOptions,
        registry: SubjectRegistry,
        planned: PlannedOffsets,
        boundaries: Boundaries,
    ) -> None:
        if options.job is None:
            raise AlignmentError("aligned mode needs a job name")
        self.options = options
        self.topic = options.kafka.topic
        self.job = options.job
        self._registry = registry
        self._planned = planned
        self._boundaries = boundaries
        self._next = NextEpoch(registry, self.topic)
        self._initial: SubjectOffset | None = None
        self._recorded: int | None = None  # the batch whose mapping this run recorded last
        self.query_id = planned.query_id()  # the mapping's source epochs are this query's batch ids

    def initial(self) -> SubjectOffset:
        """Just before the starting epoch, at its start; decided once per run (``startingEpoch``)."""
        if self._initial is None:
            start = self.options.starting_epoch
            if not isinstance(start, int):
                epochs = self._registry.epochs(self.topic)
                first, after_last = (epochs[0], epochs[-1] + 1) if epochs else (0, 0)
                start = first if start == "earliest" else after_last
            self._initial = SubjectOffset(self.topic, start - 1, self._boundaries.start_of(start) or {})
        return self._initial

    def registered(self, epoch: int) -> SubjectEpoch | None:
        """Subject epoch ``epoch`` if it is registered (asking ZooKeeper only when there may be news)."""
        return self._next.get(epoch)

    def next_after(self, current: SubjectOffset) -> SubjectOffset:
        """The end of the epoch after ``current`` (aligned) if it is registered, else ``current``."""
        if current.epoch is None:
            raise AlignmentError(f"an aligned batch follows an aligned offset, not {current.to_json()}")
        following = self._next.get(current.epoch + 1)
        return current if following is None else current.after(following)

    def partitions(self, start: SubjectOffset, end: SubjectOffset) -> list[SubjectPartition]:
        """One partition per non-empty range of the epochs after ``start`` up to ``end`` (both aligned)."""
        if end.epoch is None or start.epoch is None:
            raise AlignmentError(f"an aligned batch needs aligned offsets, not {start} -> {end}")
        batch = self._planned.first_batch_ending_at(end)
        epochs: list[SubjectEpoch] = []
        for k in range(start.epoch + 1, end.epoch + 1):
            epoch = self._boundaries.epoch(k)
            if epoch is None:
                raise AlignmentError(
                    f"epoch {k} of subject {self.topic!r}, planned for batch {batch}, is gone"
                )
            epochs.append(epoch)
        if epochs and batch != self._recorded:
            self._record(batch, end.epoch)
        return [
            SubjectPartition(r, epoch.epoch, self.options.kafka.client, self.options.read_timeout)
            for epoch in epochs
            for r in epoch.ranges
            if r.size > 0
        ]

    def _record(self, batch: int, subject_epoch: int) -> None:
        self._registry.record_mapping(
            self.topic,
            self.job,
            "aligned",
            [(batch, subject_epoch)],
            self.options.mapping_retention,
            self.query_id,
            self._planned.read,
        )
        self._recorded = batch
        log.debug(
            "batch %d of job %r reads epoch %d of subject %r", batch, self.job, subject_epoch, self.topic
        )
