"""Planning unaligned batches: a plain Kafka source, from the high watermarks, rate-limited."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping

from epochstate.core.alignment.subjects import SubjectRegistry
from epochstate.spark_plugin.alignment.offsets import SubjectOffset, limited
from epochstate.spark_plugin.alignment.options import EARLIEST, LATEST, SourceOptions
from epochstate.spark_plugin.alignment.partitions import SubjectPartition
from epochstate.spark_plugin.alignment.planned import PlannedOffsets
from epochstate.spark_plugin.kafka.admin import TopicAdmin

# Spark asks for the latest offset every few milliseconds while nothing is new;
# the broker is asked at most this often.
WATERMARK_INTERVAL_SECONDS = 0.1


class UnalignedPlanner:
    """The unaligned source's offsets and partitions for one run of the query.

    A batch reads every partition from where the previous batch ended up to the
    high watermark (or less, with ``maxOffsetsPerTrigger``). Partitions added to
    the topic are read from their earliest offset. ``planned`` (the query's
    offsets log) is needed only for the rate limit.
    """

    def __init__(
        self,
        options: SourceOptions,
        admin: TopicAdmin,
        planned: PlannedOffsets | None,
        registry: SubjectRegistry | None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.options = options
        self.topic = options.kafka.topic
        self._admin = admin
        self._planned = planned
        self._clock = clock
        self._initial: SubjectOffset | None = None
        self._watermarks: dict[int, int] = {}
        self._asked_at = -WATERMARK_INTERVAL_SECONDS
        if registry is not None and options.job is not None:
            query_id = None if planned is None else planned.query_id()
            adopt = None if planned is None else planned.read
            registry.register_source(self.topic, options.job, "unaligned", query_id, adopt)

    def initial(self) -> SubjectOffset:
        """``startingOffsets``, decided once per run."""
        if self._initial is None:
            wanted = self.options.starting_offsets
            if wanted == "earliest":
                positions = self._admin.earliest_offsets(self.topic)
            elif wanted == "latest":
                positions = dict(self._latest_watermarks(force=True))
            else:
                earliest = self._admin.earliest_offsets(self.topic)
                latest = self._latest_watermarks(force=True)
                positions = {}
                for p in earliest:
                    offset = wanted.get(p, EARLIEST)
                    positions[p] = (
                        earliest[p] if offset == EARLIEST else latest[p] if offset == LATEST else offset
                    )
            self._initial = SubjectOffset(self.topic, None, positions)
        return self._initial

    def latest(self) -> SubjectOffset:
        # Spark asks a new query for its latest offset before its initial one; deciding
        # the start first keeps "latest" from starting after the first batch's end.
        self.initial()
        newest = None if self._planned is None else self._planned.newest()
        return self.latest_from(self.initial() if newest is None else newest[1])

    def latest_from(self, current: SubjectOffset) -> SubjectOffset:
        """The end of a batch that starts at ``current`` (aligned or not): the watermarks, rate-limited."""
        watermarks = self._latest_watermarks()
        limit = self.options.max_offsets_per_trigger
        if limit is None:
            return SubjectOffset(self.topic, None, watermarks)
        starts = {**self._earliest_of_new(current, watermarks), **current.positions}
        return SubjectOffset(self.topic, None, limited(starts, watermarks, limit))

    def partitions(self, start: SubjectOffset, end: SubjectOffset) -> list[SubjectPartition]:
        ranges = start.ranges_to(end, self._earliest_of_new(start, end.positions))
        return [
            SubjectPartition(r, None, self.options.kafka.client, self.options.read_timeout) for r in ranges
        ]

    def commit(self, end: SubjectOffset) -> None:
        """Nothing to do: Kafka is not told what was read (the checkpoint knows)."""

    def _latest_watermarks(self, force: bool = False) -> dict[int, int]:
        now = self._clock()
        if force or now - self._asked_at >= WATERMARK_INTERVAL_SECONDS:
            self._watermarks = self._admin.high_watermarks(self.topic)
            self._asked_at = now
        return self._watermarks

    def _earliest_of_new(self, current: SubjectOffset, partitions: Mapping[int, int]) -> dict[int, int]:
        """The earliest offsets, if ``partitions`` has one that ``current`` does not name yet."""
        if set(partitions) <= set(current.positions):
            return {}
        return self._admin.earliest_offsets(self.topic)
