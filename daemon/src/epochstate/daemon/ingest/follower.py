"""Follows one job's checkpoint and ingests its committed epochs, in order.

Guarantees:

* Only epochs whose ``commits/<epoch>`` exists are read.
* Epochs are applied in increasing order, each in one atomic store batch; after a
  crash, ingest resumes right after the newest applied epoch (idempotent).
* An epoch whose files cannot be read is recorded as a problem with its reason and
  retried; it is never partly applied, and what was already queryable stays so.
* :meth:`JobFollower.skip_ahead` gives up on such an epoch when a later version
  can be loaded in full: that epoch is written as a complete version (the
  difference to the newest ingested one, removals included) and the epochs in
  between are recorded, in the same batch, as unavailable for good.
* Each epoch is decoded with the store shape in force at it: its schemas and its
  number of Spark partitions (see :mod:`shapes`). An epoch whose partition count
  differs from the epoch before is written as a complete version of the new layout.

Requests: operator metadata and schema files change only when a new run of the
query starts. They are read again (and compared by content) on a local disk for
every epoch (free there); on an object store when a listener report names a query
run not seen before, after an epoch failed, and at least every
:data:`METADATA_RECHECK_SECONDS`. In between, an epoch the listener has not
vouched for (reported by the run last checked) costs one HEAD per store's schema
file (or one listing per transformWithState operator; see
:meth:`Checkpoint.metadata_changed`): a query restarted without the listener can
be quick. Whether the checkpoint was recreated (``metadata``'s query id) is asked
only when the commit log went back or rewrote an entry already seen, or a report
named another query. So a later epoch costs the commit log listing, its offset
log entry and its state files, and without the listener that check.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from epochstate.core.partition_ranges import PartitionRanges, held_partitions, holds_all, shown
from epochstate.core.sparktypes import type_to_json
from epochstate.core.storage.errors import UnreadableFile
from epochstate.daemon.ingest.changes import ReadMode, StoreCodec, store_changes
from epochstate.daemon.ingest.epoch_record import epoch_record
from epochstate.daemon.ingest.shapes import ShapeWatch
from epochstate.daemon.sources.checkpoint.checkpoint import Checkpoint
from epochstate.daemon.sources.checkpoint.settings import check_settings
from epochstate.daemon.sources.errors import SourceError, UnsupportedCheckpoint
from epochstate.daemon.sources.readers import ReadsAhead, StoreReader, open_store_reader
from epochstate.daemon.store.catalog import JobEntry, StoreHandle, StoreSchema
from epochstate.daemon.store.descriptors import EpochRecord, JobProgress, StoreShape
from epochstate.daemon.store.placement import StoreChanges
from epochstate.daemon.store.versioned import VersionedStore

log = logging.getLogger(__name__)

# Operator metadata and schemas read from an object store are read again in full
# at least this often while epochs keep coming.
METADATA_RECHECK_SECONDS = 60.0
# A backlog of committed epochs is worked off from a listing at most this old.
LISTING_REUSE_SECONDS = 1.0


class EpochPublisher(Protocol):
    """Where this node and its ingested epochs are announced (ZooKeeper, in the daemon)."""

    def node_serving(self, address: str) -> None: ...

    def job_followed(self, entry: JobEntry) -> None: ...

    def epoch_ingested(self, entry: JobEntry, record: EpochRecord) -> None: ...

    def retention_moved(self, entry: JobEntry) -> None: ...


@dataclass(frozen=True)
class IngestStats:
    epoch: int
    versions_written: int
    seconds: float
    full_load: bool
    # Epochs skipped (now unavailable for good) to reach this one.
    skipped: tuple[int, ...] = ()


def _normalize(location: str) -> str:
    return location[len("file:") :] if location.startswith("file:") else location


class JobFollower:
    """Ingests one job: of each store, the Spark partitions ``partitions`` covers
    (None: every one). The files of other partitions are never read. The job's data
    in the store covers exactly those partitions (the job descriptor says which):
    data the store holds of the job for other partitions (a restart with another
    shard) is dropped and the job ingested anew, never served mixed.
    Not thread-safe: one ingest thread drives it."""

    def __init__(
        self,
        name: str,
        checkpoint: str,
        store: VersionedStore,
        publisher: EpochPublisher,
        retention: int,
        clock: Callable[[], float] = time.time,
        scratch_dir: Path | None = None,
        partitions: PartitionRanges | None = None,
    ) -> None:
        self.name = name
        self.partitions = partitions
        self._uri = checkpoint
        self.checkpoint = Checkpoint(checkpoint)
        self._location = _normalize(checkpoint)
        self._store = store
        self._publisher = publisher
        self._retention = max(1, retention)
        self._clock = clock
        self._scratch_dir = scratch_dir
        # Readers and codecs per (store id, first epoch of the shape they read).
        self._readers: dict[tuple[int, int], StoreReader] = {}
        self._codecs: dict[tuple[int, int], StoreCodec] = {}
        self._shapes = ShapeWatch(self.checkpoint)
        # When operators and schemas were last read, under which query run, whether
        # they must be read again before the next epoch, and the runs reports named.
        self._validated_at = time.monotonic()
        self._validated_run: str | None = None
        self._revalidate = False
        self._runs: dict[int, str] = {}
        self._other_query_reported = False
        # The newest listing of the commit log and when it was taken.
        self._committed: list[int] = []
        self._listed_at = 0.0
        self.entry = self._open()

    # -- set-up ----------------------------------------------------------------

    def _open(self) -> JobEntry:
        query_id = self.checkpoint.query_id()
        descriptor = self._store.job(self.name)
        if descriptor is not None and descriptor.query_id != query_id:
            # The checkpoint was recreated: a new query whose epochs restart at 0.
            log.warning(
                "job %s: checkpoint now holds query %s (was %s); dropping the old query's epochs",
                self.name,
                query_id,
                descriptor.query_id,
            )
            self._store.drop_job(descriptor)
            descriptor = None
        if descriptor is not None and descriptor.partitions != self.partitions:
            # Held for other partitions (a shard moved while the daemon was down).
            log.warning(
                "job %s: the store holds partitions %s, this daemon now follows %s; ingesting anew",
                self.name,
                shown(descriptor.partitions),
                shown(self.partitions),
            )
            self._store.drop_job(descriptor)
            descriptor = None
        if descriptor is None:
            latest = self.checkpoint.latest_committed()
            provider = self.checkpoint.provider_kind(latest) if latest is not None else "unknown"
            descriptor = self._store.add_job(self.name, self._location, query_id, provider, self.partitions)
        stores: dict[tuple[int, str], StoreHandle] = {}
        operator_names: dict[int, str] = {}
        for store_descriptor in self._store.stores(self.name):
            handle = StoreHandle.of(store_descriptor, self._store.shapes(store_descriptor))
            stores[(store_descriptor.operator_id, store_descriptor.store_name)] = handle
            operator_names[store_descriptor.operator_id] = store_descriptor.operator_name
        unavailable = self._store.unavailable(descriptor.job_id)
        entry = JobEntry(
            descriptor,
            stores=stores,
            operator_names=operator_names,
            progress=self._store.progress(descriptor.job_id),
            problems=dict(unavailable),
            unavailable=unavailable,
        )
        latest = self.checkpoint.latest_committed()
        entry.committed = -1 if latest is None else latest
        return entry

    def _discover_stores(self, epoch: int) -> set[tuple[int, str]]:
        """Register stores that appeared in the checkpoint since the last look; returns them."""
        found: set[tuple[int, str]] = set()
        for operator in self.checkpoint.operators(epoch):
            for info in operator.stores:
                if (operator.operator_id, info.name) in self.entry.stores:
                    continue
                key_schema, value_schema = self.checkpoint.store_schema(
                    operator.operator_id, info.name, epoch
                )
                # The operator metadata keeps the count the store was first written with;
                # the epoch's own is in its offset log entry (an offline repartition).
                partitions = self.checkpoint.state_partitions(epoch) or info.num_partitions
                descriptor = self._store.add_store(
                    self.name,
                    operator.operator_id,
                    operator.name or "unknown",
                    info.name,
                    partitions,
                    json.dumps(type_to_json(key_schema)),
                    json.dumps(type_to_json(value_schema)),
                    info.kind,
                    first_epoch=epoch,
                )
                key = (operator.operator_id, info.name)
                self.entry.stores = {**self.entry.stores, key: StoreHandle.of(descriptor)}
                names = {**self.entry.operator_names, operator.operator_id: operator.name or "unknown"}
                self.entry.operator_names = names
                found.add(key)
        return found

    def _learn_provider(self, epoch: int) -> None:
        # A job followed before its first commit could not tell its provider yet.
        if self.entry.descriptor.provider == "unknown":
            provider = self.checkpoint.provider_kind(epoch)
            self.entry.descriptor = self._store.set_provider(self.entry.descriptor, provider)

    def _reader(self, handle: StoreHandle, schema: StoreSchema, epoch: int) -> StoreReader:
        d = handle.descriptor
        reader = self._readers.get((d.store_id, schema.first_epoch))
        if reader is None:
            reader = open_store_reader(
                self.checkpoint,
                d.operator_id,
                d.store_name,
                schema.num_partitions,
                schema.key,
                schema.value,
                epoch,
                scratch_dir=self._scratch_dir,
                partitions=None
                if holds_all(self.partitions, schema.num_partitions)
                else self._held(schema.num_partitions),
            )
            self._readers[(d.store_id, schema.first_epoch)] = reader
        return reader

    def _held(self, num_partitions: int) -> tuple[int, ...]:
        return held_partitions(self.partitions, num_partitions)

    def _codec(self, handle: StoreHandle, schema: StoreSchema, reader: StoreReader) -> StoreCodec:
        cache_key = (handle.descriptor.store_id, schema.first_epoch)
        codec = self._codecs.get(cache_key)
        if codec is None:
            codec = StoreCodec(reader, schema.key, schema.value)
            self._codecs[cache_key] = codec
        return codec

    def reported(self, epoch: int, run_id: str = "", query_id: str = "") -> None:
        """The listener reported ``epoch`` committed by query run ``run_id`` of query
        ``query_id`` (either may be empty: unknown)."""
        if query_id and query_id != self.entry.descriptor.query_id:
            self._other_query_reported = True
        if run_id and epoch > self.entry.progress.newest:
            if len(self._runs) > 10_000:  # reports far ahead of ingest
                self._runs.clear()
            self._runs[epoch] = run_id

    def may_be_recreated(self) -> bool:
        """Whether the checkpoint may hold another query now (see :meth:`reopen_if_recreated`):
        always on a local disk (asking costs nothing); elsewhere when the commit log
        went back or rewrote an entry, or a report named another query."""
        return (
            self.checkpoint.root.is_local
            or self.log_went_back()
            or self.checkpoint.commits_rewritten
            or self._other_query_reported
        )

    def reopen_if_recreated(self) -> bool:
        """Start over when the checkpoint now holds another query (it was deleted and
        recreated): that query's epochs restart at 0, so the old query's epochs are
        dropped and nothing read from the old one is kept. Returns True when it did;
        ``entry`` is then a new object."""
        self._other_query_reported = False
        self.checkpoint.commits_rewritten = False
        if self.checkpoint.query_id() == self.entry.descriptor.query_id:
            return False
        self.checkpoint = Checkpoint(self._uri)
        self._shapes = ShapeWatch(self.checkpoint)
        self._readers.clear()
        self._codecs.clear()
        self._runs.clear()
        self._validated_run = None
        self._committed, self._listed_at = [], 0.0
        self.entry = self._open()
        return True

    # -- ingest ------------------------------------------------------------------

    def next_epoch(self) -> int | None:
        """The next committed epoch to ingest, or None when caught up. On an object
        store, a daemon working off a backlog takes it from a listing up to
        :data:`LISTING_REUSE_SECONDS` old (committed epochs stay committed; a
        checkpoint recreated meanwhile shows in the next listing)."""
        newest = self.entry.progress.newest
        known = self._committed
        if (
            newest >= 0
            and not self.checkpoint.root.is_local
            and time.monotonic() - self._listed_at < LISTING_REUSE_SECONDS
        ):
            ahead = next((e for e in known if e > newest), None)
            if ahead is not None:
                return ahead
        committed = self._committed = self.checkpoint.committed_epochs()
        self._listed_at = time.monotonic()
        if not committed:
            return None
        self.entry.committed = committed[-1]
        if newest < 0:
            # Nothing ingested yet: start with the oldest epoch retention would keep.
            first = max(committed[0], committed[-1] - self._retention + 1)
            return next(e for e in committed if e >= first)
        return next((e for e in committed if e > newest), None)

    def log_went_back(self) -> bool:
        """Whether the commit log's newest epoch is older than the newest ingested one
        (as of the last :meth:`next_epoch`): the checkpoint may have been recreated."""
        return self.entry.committed is not None and self.entry.committed < self.entry.progress.newest

    def step(self, epoch: int | None = None) -> IngestStats | None:
        """Ingest ``epoch`` (default: the next committed epoch), if any. Raises
        SourceError on bad input."""
        if epoch is None:
            epoch = self.next_epoch()
        if epoch is None:
            return None
        mode = ReadMode.FULL if self.entry.progress.empty else ReadMode.DELTA
        return self._ingest_checked(epoch, mode, {})

    def skip_ahead(self, blocked: int, reason: str) -> IngestStats | None:
        """Give up on ``blocked`` (failing with ``reason``): ingest the first later
        committed epoch whose version loads in full from its own snapshot, and record
        every epoch in between as unavailable. None when no later epoch can be loaded
        in full yet (ingest then keeps retrying ``blocked``). A later epoch refused
        for what it is (``UnsupportedCheckpoint``: a setting or format this daemon
        does not read) is recorded as a problem with its reason, so that a read pinned
        to it is refused with that reason rather than left waiting.
        """
        later = [e for e in self.checkpoint.committed_epochs() if e > blocked]
        for candidate in later:
            try:
                if not all(self._loads_in_full(h, candidate) for h in self.entry.stores.values()):
                    continue
                gap = {blocked: reason}
                for e in range(blocked + 1, candidate):
                    gap[e] = f"skipped: epoch {blocked} before it cannot be read ({reason})"
                mode = ReadMode.FULL if self.entry.progress.empty else ReadMode.REBASE
                return self._ingest_checked(candidate, mode, gap)
            except (SourceError, UnreadableFile) as error:
                log.warning("job %s: cannot load epoch %d in full either: %s", self.name, candidate, error)
                if isinstance(error, UnsupportedCheckpoint):
                    self.entry.set_problem(candidate, str(error))
        return None

    def _loads_in_full(self, handle: StoreHandle, epoch: int) -> bool:
        if handle.latest.version.absent:
            return True
        return self._reader(handle, handle.latest, epoch).has_full(epoch + 1)

    def _metadata_due(self, epoch: int) -> bool:
        """Whether operators and schemas must be read again in full before ``epoch``."""
        if self._revalidate or self.checkpoint.root.is_local:
            return True
        run = self._runs.get(epoch)
        if run is not None and run != self._validated_run:
            return True
        return time.monotonic() - self._validated_at >= METADATA_RECHECK_SECONDS

    def _vouched(self, epoch: int) -> bool:
        """Whether the listener reported ``epoch`` from the run the metadata was read under."""
        run = self._runs.get(epoch)
        return run is not None and run == self._validated_run

    def _ingest_checked(self, epoch: int, mode: ReadMode, skipped: dict[int, str]) -> IngestStats:
        due = self._metadata_due(epoch)
        if not due and not self._vouched(epoch) and self.checkpoint.metadata_changed():
            log.info("job %s: a schema changed before epoch %d", self.name, epoch)
            due = True
        if due:
            self.checkpoint.forget_metadata()
            self._validated_at = time.monotonic()
            self._validated_run = self._runs.get(epoch, self._validated_run)
        try:
            stats = self._ingest(epoch, mode, skipped)
        except BaseException:
            self._revalidate = True  # the failure may come from a changed schema
            raise
        self._revalidate = False
        for old in [e for e in self._runs if e <= epoch]:
            del self._runs[old]
        return stats

    def _read_ahead(self, epoch: int, mode: ReadMode) -> None:
        """On an object store, start reading the files this epoch's changes and record
        need, and the next epoch's once committed: their round trips overlap each
        other and this epoch's decoding."""
        if self.checkpoint.root.is_local or mode is not ReadMode.DELTA:
            return
        for e in (epoch, epoch + 1):
            if e > epoch and not self.checkpoint.listed(e):
                break
            self.checkpoint.read_ahead_epoch_log(e)
            for handle in self.entry.stores.values():
                reader = self._readers.get((handle.descriptor.store_id, handle.schema_at(e).first_epoch))
                if isinstance(reader, ReadsAhead):
                    reader.read_ahead(e + 1)

    def _ingest(self, epoch: int, mode: ReadMode, skipped: dict[int, str]) -> IngestStats:
        started = time.perf_counter()
        check_settings(self.checkpoint.epoch_log(epoch).conf, f"{self.checkpoint.root}/offsets/{epoch}")
        new_stores = self._discover_stores(epoch)
        self._learn_provider(epoch)
        self._read_ahead(epoch, mode)
        view = self._store.view()
        newest = self.entry.progress.newest
        changes: dict[int, StoreChanges] = {}
        introduced: list[tuple[int, StoreShape]] = []
        handles: dict[tuple[int, str], StoreHandle] = {}
        for key, handle in self.entry.stores.items():
            before_shape = handle.schema_at(epoch)
            shape = self._shapes.change_at(handle, epoch)
            if shape is not None:
                log.info(
                    "job %s: store %s/%s has a new shape from epoch %d (%d partitions)",
                    self.name,
                    *key,
                    epoch,
                    shape.num_partitions,
                )
                handle = handle.with_schema(shape)
                introduced.append((handle.descriptor.store_id, shape))
            handles[key] = handle
            schema = handle.schema_at(epoch)
            if schema.version.absent:
                continue  # not part of this epoch's query: nothing to read, reads refused
            reader = self._reader(handle, schema, epoch)
            store_id = handle.descriptor.store_id
            # A store first seen now may have versions before this one (noticed late);
            # a store whose keys are spread over another number of partitions now has
            # no change file relative to the last layout: its epoch is a whole version.
            # So is one whose schemas changed (every live key, untouched ones included,
            # is then read in the new schema) or that is declared again.
            relaid = schema.num_partitions != before_shape.num_partitions
            reshaped = not schema.version.same_schemas(before_shape.version) or before_shape.version.absent
            rebase = key in new_stores or relaid or reshaped
            store_mode = ReadMode.REBASE if rebase and mode is ReadMode.DELTA else mode
            changes[store_id] = store_changes(
                reader, self._codec(handle, schema, reader), epoch + 1, store_mode, view, store_id, newest
            )
        record = self._record(epoch)
        # Readers must see the new schemas and the skipped epochs no later than the
        # epoch itself: publish them first, and take them back if the write fails.
        stores_before, unavailable_before = self.entry.stores, self.entry.unavailable
        self.entry.stores = {**stores_before, **handles}
        self.entry.unavailable = {**unavailable_before, **skipped}
        try:
            result = self._store.apply_epoch(
                self.entry.descriptor,
                epoch,
                changes,
                record,
                fresh=mode is ReadMode.FULL,
                shapes=introduced,
                unavailable=skipped,
            )
        except BaseException:
            self.entry.stores, self.entry.unavailable = stores_before, unavailable_before
            raise
        problems = {**self.entry.problems, **skipped}
        problems.pop(epoch, None)
        self.entry.problems = problems
        self.entry.progress = result.progress
        self._publisher.epoch_ingested(self.entry, record)
        self._retire(epoch, result.progress)
        seconds = time.perf_counter() - started
        full = mode is not ReadMode.DELTA
        return IngestStats(epoch, result.versions_written, seconds, full, tuple(skipped))

    def _retire(self, epoch: int, progress: JobProgress) -> None:
        floor = epoch - self._retention + 1
        if floor > progress.oldest:
            self._store.apply_retention(self.entry.descriptor, floor)
            self.entry.progress = self._store.progress(self.entry.descriptor.job_id)
            retired = [e for e in self.entry.unavailable if e < self.entry.progress.oldest]
            if retired:
                self.entry.unavailable = {e: r for e, r in self.entry.unavailable.items() if e not in retired}
                self.entry.clear_problems(retired)
            self._publisher.retention_moved(self.entry)

    def _record(self, epoch: int) -> EpochRecord:
        return epoch_record(self.checkpoint, epoch, int(self._clock() * 1000))

    @property
    def progress(self) -> JobProgress:
        return self.entry.progress
