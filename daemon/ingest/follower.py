"""Follows one job's checkpoint and ingests its committed epochs, in order.

Guarantees:

* Only epochs whose ``commits/<epoch>`` exists are read.
* Epochs are applied in increasing order, each in one atomic store batch; after a
  crash, ingest resumes right after the newest applied epoch (idempotent).
* An epoch whose files cannot be read is recorded as a problem with its reason and
  retried later; it is never partly applied, and what was already queryable stays so.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from epochstate.daemon.ingest.catalog import JobEntry, StoreHandle
from epochstate.daemon.records import RecordEncoder
from epochstate.daemon.sources.checkpoint import Checkpoint
from epochstate.daemon.sources.epochlog import SourceRange
from epochstate.daemon.sources.errors import MissingCheckpointFile, MissingStateFile
from epochstate.daemon.sources.readers import StoreReader, open_store_reader
from epochstate.daemon.sources.sparktypes import type_to_json
from epochstate.daemon.store import keycodec
from epochstate.daemon.store.descriptors import EpochRecord, JobProgress
from epochstate.daemon.store.descriptors import SourceRange as SourcePosition
from epochstate.daemon.store.versioned import Change, VersionedStore

log = logging.getLogger(__name__)


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


def _normalize(location: str) -> str:
    return location[len("file:") :] if location.startswith("file:") else location


class JobFollower:
    """Ingests one job. Not thread-safe: one ingest thread drives it."""

    def __init__(
        self,
        name: str,
        checkpoint: str,
        store: VersionedStore,
        publisher: EpochPublisher,
        retention: int,
        clock: Callable[[], float] = time.time,
        scratch_dir: Path | None = None,
    ) -> None:
        self.name = name
        self.checkpoint = Checkpoint(Path(_normalize(checkpoint)))
        self._location = _normalize(checkpoint)
        self._store = store
        self._publisher = publisher
        self._retention = max(1, retention)
        self._clock = clock
        self._scratch_dir = scratch_dir
        self._readers: dict[int, StoreReader] = {}
        self._encoders: dict[int, RecordEncoder] = {}
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
        if descriptor is None:
            latest = self.checkpoint.latest_committed()
            provider = self.checkpoint.provider_kind(latest) if latest is not None else "unknown"
            descriptor = self._store.add_job(self.name, self._location, query_id, provider)
        entry = JobEntry(descriptor)
        for store_descriptor in self._store.stores(self.name):
            handle = StoreHandle.of(store_descriptor)
            entry.stores[(store_descriptor.operator_id, store_descriptor.store_name)] = handle
            entry.operator_names[store_descriptor.operator_id] = store_descriptor.operator_name
        entry.progress = self._store.progress(descriptor.job_id)
        latest = self.checkpoint.latest_committed()
        entry.committed = -1 if latest is None else latest
        return entry

    def _discover_stores(self) -> None:
        """Register stores that appeared in the checkpoint since the last look."""
        for operator in self.checkpoint.operators():
            for info in operator.stores:
                if (operator.operator_id, info.name) in self.entry.stores:
                    continue
                key_schema, value_schema = self.checkpoint.store_schema(operator.operator_id, info.name)
                descriptor = self._store.add_store(
                    self.name,
                    operator.operator_id,
                    operator.name or "unknown",
                    info.name,
                    info.num_partitions,
                    json.dumps(type_to_json(key_schema)),
                    json.dumps(type_to_json(value_schema)),
                    info.kind,
                )
                self.entry.stores[(operator.operator_id, info.name)] = StoreHandle.of(descriptor)
                self.entry.operator_names[operator.operator_id] = operator.name or "unknown"

    def _reader(self, handle: StoreHandle, epoch: int) -> StoreReader:
        d = handle.descriptor
        reader = self._readers.get(d.store_id)
        if reader is None:
            reader = open_store_reader(
                self.checkpoint,
                d.operator_id,
                d.store_name,
                d.num_partitions,
                handle.key_schema,
                handle.value_schema,
                epoch,
                scratch_dir=self._scratch_dir,
            )
            self._readers[d.store_id] = reader
        return reader

    def reopen_if_recreated(self) -> bool:
        """Start over when the checkpoint now holds another query (it was deleted and
        recreated): that query's epochs restart at 0, so the old query's epochs are
        dropped. Returns True when it did; ``entry`` is then a new object."""
        if self.checkpoint.query_id() == self.entry.descriptor.query_id:
            return False
        self._readers.clear()
        self._encoders.clear()
        self.entry = self._open()
        return True

    # -- ingest ------------------------------------------------------------------

    def next_epoch(self) -> int | None:
        """The next committed epoch to ingest, or None when caught up."""
        committed = self.checkpoint.committed_epochs()
        if not committed:
            return None
        self.entry.committed = committed[-1]
        newest = self.entry.progress.newest
        if newest < 0:
            # Nothing ingested yet: start with the oldest epoch retention would keep.
            first = max(committed[0], committed[-1] - self._retention + 1)
            return next(e for e in committed if e >= first)
        return next((e for e in committed if e > newest), None)

    def step(self) -> IngestStats | None:
        """Ingest the next committed epoch, if any. Raises SourceError on bad input."""
        epoch = self.next_epoch()
        if epoch is None:
            return None
        started = time.perf_counter()
        self._discover_stores()
        full = self.entry.progress.empty
        changes: list[Change] = []
        for handle in self.entry.stores.values():
            changes.extend(self._changes(handle, epoch, full))
        record = self._record(epoch)
        result = self._store.apply_epoch(self.entry.descriptor, epoch, changes, record, fresh=full)
        self.entry.problems.pop(epoch, None)
        self.entry.progress = result.progress
        self._publisher.epoch_ingested(self.entry, record)
        floor = epoch - self._retention + 1
        if floor > result.progress.oldest:
            self._store.apply_retention(self.entry.descriptor, floor)
            self.entry.progress = self._store.progress(self.entry.descriptor.job_id)
            self._publisher.retention_moved(self.entry)
        return IngestStats(epoch, result.versions_written, time.perf_counter() - started, full)

    def _encoder(self, handle: StoreHandle) -> RecordEncoder:
        encoder = self._encoders.get(handle.descriptor.store_id)
        if encoder is None:
            encoder = RecordEncoder(handle.key_schema, handle.value_schema)
            self._encoders[handle.descriptor.store_id] = encoder
        return encoder

    def _changes(self, handle: StoreHandle, epoch: int, full: bool) -> Iterator[Change]:
        reader = self._reader(handle, epoch)
        encode = self._encoder(handle).present
        store_id = handle.descriptor.store_id
        version = epoch + 1
        if not full:
            try:
                # Read the whole delta before yielding: a missing file must be
                # found before any change of this store is handed on.
                delta = list(reader.changes(version))
            except MissingStateFile:
                log.info("job %s: no delta for version %d; diffing the full state", self.name, version)
                yield from self._diff_full(handle, reader, version)
                return
            for c in delta:
                payload = None if c.value is None else encode(c.partition, c.key, c.value)
                yield Change(store_id, c.key, payload)
            return
        for c in reader.full_state(version):
            assert c.value is not None
            yield Change(store_id, c.key, encode(c.partition, c.key, c.value))

    def _diff_full(self, handle: StoreHandle, reader: StoreReader, version: int) -> Iterator[Change]:
        """Changes that turn the newest ingested state into the full state at ``version``."""
        store_id = handle.descriptor.store_id
        encode = self._encoder(handle).present
        present: set[bytes] = set()
        for c in reader.full_state(version):
            assert c.value is not None
            present.add(keycodec.encode_fields(c.key))
            yield Change(store_id, c.key, encode(c.partition, c.key, c.value))
        view = self._store.view()
        after: bytes | None = None
        while True:
            page = view.scan(store_id, self.entry.progress.newest, b"", None, 10_000, after)
            if not page:
                break
            for v in page:
                if v.encoded_key not in present:
                    yield Change(store_id, handle.decode_key(v.encoded_key), None)
            after = page[-1].encoded_key

    def _record(self, epoch: int) -> EpochRecord:
        log_entry = self.checkpoint.epoch_log(epoch)
        try:
            positions = self.checkpoint.source_positions(epoch)
        except MissingCheckpointFile:
            # The previous offsets entry was purged: the start is unknown.
            positions = tuple(SourceRange(None, end) for end in log_entry.source_offsets)
        return EpochRecord(
            epoch=epoch,
            committed_at_ms=self.checkpoint.commit_time_ms(epoch),
            ingested_at_ms=int(self._clock() * 1000),
            watermark_ms=log_entry.batch_watermark_ms,
            sources=tuple(SourcePosition(f"source-{i}", p.start, p.end) for i, p in enumerate(positions)),
        )

    @property
    def progress(self) -> JobProgress:
        return self.entry.progress
