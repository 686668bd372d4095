"""The local multi-version store: one logical record per (store, key, epoch).

Guarantees:

* The store keeps an opaque payload per (store, key, epoch); keys are ordered by
  their :mod:`keycodec` encoding. (The daemon's payloads are serialized
  ``epochstate.v1.Record`` messages, so a read copies bytes and decodes nothing.)
* An epoch's changes, its epoch record and the job's progress marker are written
  in one RocksDB ``WriteBatch``: after a crash an epoch is either wholly visible or
  not at all. With ``sync_writes`` that batch is on disk (the WAL fsynced) before
  :meth:`VersionedStore.apply_epoch` returns, so an epoch announced afterwards
  survives a power loss; so does everything written before it (the WAL is replayed
  in order).
* Dropping a job is one batch too (range deletions, the descriptors, a
  "dropped" record): a read sees the whole job or none of it, and a crash cannot
  leave versions gone under a progress marker that still names their epochs.
* A read RocksDB fails (a damaged or unreadable file) raises StoreDamaged
  (:mod:`damage`); it is never taken for "absent" or for the end of a range. So
  does opening a store whose write-ahead log is damaged before its last record
  (:meth:`StoreOptions.to_options`): replay never stops silently mid-log, and a
  store whose descriptors, progress markers or epoch records cannot be read in full
  (:mod:`integrity`, the start-up check).
* A read at epoch ``e`` returns the newest version ``<= e`` of the key; a tombstone
  there means "absent".
* Reads go through a :class:`StoreView` (:mod:`view`), a RocksDB snapshot, so
  retention running concurrently can never make a read see a half-reclaimed
  epoch: the view's progress marker and its data come from the same instant.
* Retention reclaims exactly the versions no retained epoch can see, found through
  the garbage index written alongside each epoch (no full scans): per epoch, the
  keys of the versions it superseded, packed into a few values rather than one
  entry per key (which cost as much to write as the versions themselves).
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from rocksdict import BlockBasedOptions, Cache, DBRecoveryMode, Options, Rdict, WriteBatch, WriteOptions

from epochstate.core.partition_ranges import PartitionRanges
from epochstate.daemon.store import damage, integrity, layout
from epochstate.daemon.store.descriptors import (
    DroppedJob,
    EpochRecord,
    IngestNotes,
    JobDescriptor,
    JobProgress,
    StoreDescriptor,
    StoreShape,
)
from epochstate.daemon.store.errors import LayoutMismatch, StoreDamaged
from epochstate.daemon.store.newest import KeyDigest, key_digest
from epochstate.daemon.store.placement import Placed, StoreChanges, VersionPlacer
from epochstate.daemon.store.reads import StoreReads

# Data keys per garbage index value (a few MB at most).
_GARBAGE_CHUNK = 50_000


@dataclass(frozen=True, slots=True)
class StoreOptions:
    """RocksDB tuning for the daemon's store."""

    write_buffer_mb: int = 64
    max_background_jobs: int = 2
    block_cache_mb: int = 128
    sync_writes: bool = True
    """Fsync the WAL with each epoch's batch (and a job drop's) before the write
    returns: what the daemon announces as ingested survives a power loss."""
    newest_keys_per_store: int = 16_000_000
    """Keys per store whose newest version the writer remembers (~16 bytes each, as
    many as the store has live keys); a store with more forgets them, and then each
    change an epoch makes costs a RocksDB seek."""

    def to_options(self) -> Options:
        opts = Options(raw_mode=True)
        opts.create_if_missing(True)
        # Replaying the write-ahead log at start-up: RocksDB's default (point in time)
        # stops silently at the first bad record, wherever it is, so a damaged record in
        # the middle of the log would drop every epoch after it, synced and announced
        # ones included. This mode accepts only an incomplete record at the end of a
        # log (what a power loss leaves: the write that was not synced) and refuses to
        # open on a bad record anywhere else: the store is then damaged (StoreDamaged).
        opts.set_wal_recovery_mode(DBRecoveryMode.tolerate_corrupted_tail_records())
        opts.set_write_buffer_size(self.write_buffer_mb << 20)
        opts.set_max_background_jobs(self.max_background_jobs)
        # Every data read is a seek (a key's newest version at or before an epoch):
        # whole-key blooms and data-block hash indexes serve only point gets, and
        # the memtable's bloom costs every write and serves no read. Only a block cache.
        table = BlockBasedOptions()
        table.set_block_cache(Cache(self.block_cache_mb << 20))
        opts.set_block_based_table_factory(table)
        # Writes come from the ingest loop; a group of them is inserted by its leader.
        opts.set_allow_concurrent_memtable_write(False)
        return opts


@dataclass(frozen=True, slots=True)
class ApplyResult:
    progress: JobProgress
    versions_written: int


class VersionedStore(StoreReads):
    """The daemon's RocksDB. One writer (the ingest loop) per job; many readers."""

    def __init__(
        self, path: Path | str, options: StoreOptions | None = None, *, key_hash: KeyDigest = key_digest
    ) -> None:
        """Open (or create) the store at ``path``. ``key_hash``: how the writer
        remembers keys (:mod:`newest`; tests pass digests that collide)."""
        self._options = options or StoreOptions()
        Path(path).mkdir(parents=True, exist_ok=True)
        try:
            self._db: Rdict | None = Rdict(str(path), self._options.to_options())
        except Exception as error:  # rocksdict raises bare exceptions: a missing or damaged file
            raise StoreDamaged(f"cannot open the daemon's store at {path}: {error}") from error
        self._durable = WriteOptions()
        self._durable.sync = self._options.sync_writes
        self._lock = threading.Lock()  # guards id allocation and descriptor writes
        self._placer = VersionPlacer(lambda: self.db, self._options.newest_keys_per_store, key_hash)
        self._closed = False
        try:
            self._check_layout(Path(path))
            integrity.check_records(self.db)
        except (LayoutMismatch, StoreDamaged):
            self.close()
            raise

    def _check_layout(self, path: Path) -> None:
        """Stamp a new store with :data:`layout.LAYOUT_VERSION` (and restamp one of a
        version in :data:`layout.UPGRADES_FROM`); refuse one written with another.

        Raises:
            LayoutMismatch: the store holds data of another layout version. Nothing
                in it is lost by deleting it: every retained epoch is re-ingested
                from the checkpoints.
        """
        db = self.db
        stamped = damage.get(db, layout.LAYOUT, "the layout version")
        if stamped is None:
            it = db.iter()
            it.seek_to_first()
            if not it.valid():
                damage.ended(it, "the first key")
                db.put(layout.LAYOUT, str(layout.LAYOUT_VERSION).encode())
                return
            found = "1"  # layout 1 had no version key
        else:
            found = bytes(stamped).decode()
        if found in layout.UPGRADES_FROM:
            db.put(layout.LAYOUT, str(layout.LAYOUT_VERSION).encode())
            return
        if found != str(layout.LAYOUT_VERSION):
            raise LayoutMismatch(
                f"the store at {path} has layout version {found}, this daemon writes version "
                f"{layout.LAYOUT_VERSION}; delete that directory (the daemon re-ingests every retained "
                f"epoch from the checkpoints) or run the epochstate release that wrote it"
            )

    # -- lifecycle ---------------------------------------------------------

    def close(self) -> None:
        if self._db is not None:
            self._db.flush()
            self._db.close()
            self._db = None

    # -- descriptors ---------------------------------------------------------

    def _given_ids(self) -> tuple[int, int]:
        """The highest job id and store id ever given (ids of dropped jobs included)."""
        raw = damage.get(self.db, layout.IDS, "the id counters")
        if raw is not None:
            return layout.unpack_ids(raw)
        # A store written before the counters: the ids in use, and those of dropped jobs.
        dropped = [layout.dropped_job_id(k) for k, _ in self._scan_prefix(layout.DROPPED)]
        jobs = [j.job_id for j in self.jobs()] + dropped
        stores = [StoreDescriptor.from_json(v).store_id for _, v in self._scan_prefix(layout.STORE)]
        return max(jobs, default=0), max(stores, default=0)

    def add_job(
        self,
        name: str,
        checkpoint: str,
        query_id: str,
        provider: str,
        partitions: PartitionRanges | None = None,
    ) -> JobDescriptor:
        """Record a job (or a new incarnation of it: a new query id gets a new id; ids
        are never given twice, so a read still holding a dropped job's id finds it dropped)
        whose data will cover the Spark ``partitions`` given (None: all of them)."""
        with self._lock:
            job_ids, store_ids = self._given_ids()
            descriptor = JobDescriptor(name, job_ids + 1, checkpoint, query_id, provider, partitions)
            batch = WriteBatch(raw_mode=True)
            batch.put(layout.job_key(name), descriptor.to_json())
            batch.put(layout.IDS, layout.pack_ids(descriptor.job_id, store_ids))
            self._write(batch)
            return descriptor

    def set_provider(self, job: JobDescriptor, provider: str) -> JobDescriptor:
        """Record which state store provider writes the job's state (known from its first epoch)."""
        with self._lock:
            descriptor = dataclasses.replace(job, provider=provider)
            batch = WriteBatch(raw_mode=True)
            batch.put(layout.job_key(job.name), descriptor.to_json())
            self._write(batch)
            return descriptor

    def add_store(
        self,
        job: str,
        operator_id: int,
        operator_name: str,
        store_name: str,
        num_partitions: int,
        key_schema_json: str,
        value_schema_json: str,
        kind: str = "",
        first_epoch: int = 0,
    ) -> StoreDescriptor:
        """Record a store with the schemas it is first seen with, in force from ``first_epoch``."""
        with self._lock:
            job_ids, store_ids = self._given_ids()
            descriptor = StoreDescriptor(
                store_ids + 1,
                job,
                operator_id,
                operator_name,
                store_name,
                num_partitions,
                key_schema_json,
                value_schema_json,
                kind,
                first_epoch,
            )
            batch = WriteBatch(raw_mode=True)
            batch.put(layout.store_key(descriptor.store_id), descriptor.to_json())
            batch.put(layout.IDS, layout.pack_ids(job_ids, descriptor.store_id))
            self._write(batch)
            self._placer.new_store(descriptor.store_id)
            return descriptor

    # -- writes ----------------------------------------------------------------

    def apply_epoch(
        self,
        job: JobDescriptor,
        epoch: int,
        changes: Mapping[int, StoreChanges],
        record: EpochRecord,
        *,
        fresh: bool = False,
        shapes: Sequence[tuple[int, StoreShape]] = (),
        unavailable: Mapping[int, str] | None = None,
    ) -> ApplyResult:
        """Write one epoch's changes (per store id), its record and the progress marker
        atomically.

        ``fresh`` says the job has no versions yet (a full-state load), which skips
        the look-up of superseded versions. ``shapes`` are (store id, shape) pairs
        this epoch introduces; ``unavailable`` are the skipped epochs before it (never
        to be served) with their reasons: both are written in the same batch.
        Epochs must be applied in increasing order; re-applying the newest epoch is a
        no-op.
        """
        current = self.progress(job.job_id)
        if epoch <= current.newest:
            return ApplyResult(current, 0)
        batch = WriteBatch(raw_mode=True)
        garbage: list[bytes] = []
        placer = self._placer
        placed = [
            placer.place_fresh(batch, store_id, store_changes, epoch)
            if fresh
            else placer.place(batch, store_id, store_changes, epoch, garbage)
            for store_id, store_changes in changes.items()
        ]
        for chunk, start in enumerate(range(0, len(garbage), _GARBAGE_CHUNK)):
            value = layout.pack_keys(garbage[start : start + _GARBAGE_CHUNK])
            batch.put(layout.garbage_key(job.job_id, epoch, chunk), value)
        # A full load has no index: its changes are known only at epoch 0 (nothing came
        # before it), where they are the whole state, read by a walk (history.changes);
        # indexing every key of a large first load cost it about 40 % more time.
        if not fresh:
            for store_id, part in zip(changes, placed, strict=True):
                _index_changes(batch, store_id, epoch, part)
        oldest = current.oldest if current.oldest >= 0 else epoch
        progress = JobProgress(epoch, oldest)
        for store_id, shape in shapes:
            batch.put(layout.schema_key(store_id, shape.first_epoch), shape.to_json())
        for skipped, reason in (unavailable or {}).items():
            batch.put(layout.unavailable_key(job.job_id, skipped), reason.encode("utf-8"))
        batch.put(layout.epoch_key(job.job_id, epoch), record.to_json())
        batch.put(layout.progress_key(job.job_id), layout.pack_progress(progress.newest, progress.oldest))
        self._write(batch, durable=True)
        for part in placed:
            part.settle(epoch)
        return ApplyResult(progress, sum(len(p.live) + len(p.removed) for p in placed))

    def apply_retention(self, job: JobDescriptor, oldest: int) -> int:
        """Make ``oldest`` the oldest retained epoch; reclaim what no epoch >= it sees.

        Returns the number of versions reclaimed. Moving the floor and deleting the
        versions happen in one batch. It is not synced on its own: lost to a power
        loss, retention is done again after the next epoch, and the versions it
        would have reclaimed read as they did (the next epoch's synced batch makes
        it durable, the WAL being replayed in order).
        """
        current = self.progress(job.job_id)
        if current.empty or oldest <= current.oldest:
            return 0
        oldest = min(oldest, current.newest)
        batch = WriteBatch(raw_mode=True)
        reclaimed = 0
        for key, value in self._scan_prefix(layout.garbage_prefix(job.job_id)):
            if layout.garbage_epoch(key) > oldest:
                break
            for target in layout.unpack_keys(value):
                batch.delete(target)
                reclaimed += 1
            batch.delete(key)
        for record in self.epochs(job.job_id, 0):
            if record.epoch >= oldest:
                break
            batch.delete(layout.epoch_key(job.job_id, record.epoch))
        # The changes of the oldest retained epoch and older are never read again.
        for store in self.stores(job.name):
            for key, _ in self._scan_prefix(layout.changed_prefix(store.store_id)):
                if layout.changed_epoch(key) > oldest:
                    break
                batch.delete(key)
        for skipped in self.unavailable(job.job_id):
            if skipped < oldest:
                batch.delete(layout.unavailable_key(job.job_id, skipped))
        batch.put(layout.progress_key(job.job_id), layout.pack_progress(current.newest, oldest))
        self._write(batch)
        return reclaimed

    def drop_job(self, job: JobDescriptor) -> None:
        """Delete every version, record and descriptor of a job, in one batch that also
        records the job as dropped (:meth:`dropped`).

        Reads see the whole job or nothing of it: a view taken before the batch reads
        the job as it was; one taken after finds no progress marker and the dropped
        record, so a read still holding the job's descriptor is refused, never
        answered "absent". A crash leaves the job either whole or gone.
        """
        stores = self.stores(job.name)
        progress = self.progress(job.job_id)
        with self._lock:
            batch = WriteBatch(raw_mode=True)
            for store in stores:
                for prefix in (
                    layout.data_prefix(store.store_id),
                    layout.schema_prefix(store.store_id),
                    layout.changed_prefix(store.store_id),
                ):
                    batch.delete_range(prefix, _end(prefix))
                batch.delete(layout.store_key(store.store_id))
            for prefix in (
                layout.garbage_prefix(job.job_id),
                layout.epoch_prefix(job.job_id),
                layout.unavailable_prefix(job.job_id),
            ):
                batch.delete_range(prefix, _end(prefix))
            batch.delete(layout.progress_key(job.job_id))
            batch.delete(layout.notes_key(job.job_id))
            batch.delete(layout.job_key(job.name))
            # The ids stay given: a new incarnation never reuses them.
            batch.put(layout.IDS, layout.pack_ids(*self._given_ids()))
            dropped = DroppedJob(job.name, job.query_id, progress.newest, progress.oldest, now_ms())
            batch.put(layout.dropped_key(job.job_id), dropped.to_json())
            self._write(batch, durable=True)
        for store in stores:
            self._placer.forget_store(store.store_id)

    def note(self, job: JobDescriptor, notes: IngestNotes) -> None:
        """Record ``notes`` of ``job`` for readers in other processes (not synced: notes
        lost to a power loss are noted again by the next pass of ingest)."""
        batch = WriteBatch(raw_mode=True)
        batch.put(layout.notes_key(job.job_id), notes.to_json())
        self._write(batch)

    def _write(self, batch: WriteBatch, durable: bool = False) -> None:
        """Write ``batch`` atomically; ``durable``: fsync the WAL first when ``sync_writes``
        is on (an unsynced write is made durable by the next durable one)."""
        if durable:
            self.db.write(batch, self._durable)
        else:
            self.db.write(batch)


def _index_changes(batch: WriteBatch, store_id: int, epoch: int, placed: Placed) -> None:
    """Write the change index of one store's epoch: the keys it gave a version, in key
    order; one empty chunk when none, so that an indexed epoch is told from one written
    before the index (read by a walk)."""
    changed = sorted([*placed.live, *placed.removed])
    if not changed:
        batch.put(layout.changed_key(store_id, epoch, 0), b"")
        return
    for chunk, start in enumerate(range(0, len(changed), _GARBAGE_CHUNK)):
        value = layout.pack_keys(changed[start : start + _GARBAGE_CHUNK])
        batch.put(layout.changed_key(store_id, epoch, chunk), value)


def _end(prefix: bytes) -> bytes:
    end = layout.prefix_end(prefix)
    assert end is not None  # every prefix starts with a tag byte below 0xff
    return end


def now_ms() -> int:
    return int(time.time() * 1000)
