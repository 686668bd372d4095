"""Reads of the daemon's store that need no write access: :class:`StoreReads`.

The writer (:class:`~epochstate.daemon.store.versioned.VersionedStore`, the ingest
process) and the read-only followers of its files
(:class:`~epochstate.daemon.store.secondary.SecondaryStore`, serving processes and
in-process clients) read descriptors, epoch records and progress markers the same
way: through this class, over whichever RocksDB instance they hold.
"""

from __future__ import annotations

from collections.abc import Iterator

from rocksdict import Rdict

from epochstate.daemon.store import damage, layout
from epochstate.daemon.store.descriptors import (
    DroppedJob,
    EpochRecord,
    IngestNotes,
    JobDescriptor,
    JobProgress,
    StoreDescriptor,
    StoreShape,
)
from epochstate.daemon.store.errors import StoreClosed, UnknownJob
from epochstate.daemon.store.view import StoreView


class StoreReads:
    """Read-only access to a store's records; subclasses hold the RocksDB instance."""

    _db: Rdict | None = None

    @property
    def db(self) -> Rdict:
        if self._db is None:
            raise StoreClosed("the store is closed")
        return self._db

    def view(self) -> StoreView:
        return StoreView(self.db)

    def _scan_prefix(self, prefix: bytes) -> Iterator[tuple[bytes, bytes]]:
        it = self.db.iter()
        it.seek(prefix)
        while it.valid():
            key = it.key()
            if not key.startswith(prefix):
                return
            yield key, it.value()
            it.next()
        damage.ended(it, f"keys under {prefix!r}")

    def jobs(self) -> list[JobDescriptor]:
        return [JobDescriptor.from_json(v) for _, v in self._scan_prefix(layout.JOB)]

    def job(self, name: str) -> JobDescriptor | None:
        raw = damage.get(self.db, layout.job_key(name), f"job {name!r}")
        return None if raw is None else JobDescriptor.from_json(raw)

    def require_job(self, name: str) -> JobDescriptor:
        found = self.job(name)
        if found is None:
            raise UnknownJob(f"job {name!r} is not followed by this daemon")
        return found

    def stores(self, job: str) -> list[StoreDescriptor]:
        found = [StoreDescriptor.from_json(v) for _, v in self._scan_prefix(layout.STORE)]
        return [s for s in found if s.job == job]

    def shapes(self, store: StoreDescriptor) -> list[StoreShape]:
        """Every shape of ``store``, oldest first (the first is the descriptor's)."""
        shapes = [store.first_shape]
        for _, raw in self._scan_prefix(layout.schema_prefix(store.store_id)):
            shapes.append(StoreShape.from_json(raw, shapes[-1].num_partitions))
        return shapes

    def unavailable(self, job_id: int) -> dict[int, str]:
        """Committed epochs that were skipped because their state could not be read, with why."""
        return {
            layout.epoch_of_epoch_key(k): v.decode("utf-8", "replace")
            for k, v in self._scan_prefix(layout.unavailable_prefix(job_id))
        }

    def progress(self, job_id: int) -> JobProgress:
        return self.view().progress(job_id)

    def epochs(self, job_id: int, from_epoch: int = 0, limit: int = 0) -> list[EpochRecord]:
        out: list[EpochRecord] = []
        prefix = layout.epoch_prefix(job_id)
        it = self.db.iter()
        it.seek(layout.epoch_key(job_id, max(from_epoch, 0)))
        while it.valid() and it.key().startswith(prefix):
            out.append(EpochRecord.from_json(it.value()))
            if limit and len(out) >= limit:
                return out
            it.next()
        if not it.valid():
            damage.ended(it, f"epoch records of job id {job_id}")
        return out

    def dropped(self, job_id: int) -> DroppedJob | None:
        """What a dropped job was (None: ``job_id`` was not dropped)."""
        raw = damage.get(self.db, layout.dropped_key(job_id), f"dropped job id {job_id}")
        return None if raw is None else DroppedJob.from_json(raw)

    def epoch_record(self, job_id: int, epoch: int) -> EpochRecord | None:
        raw = damage.get(self.db, layout.epoch_key(job_id, epoch), f"epoch {epoch} of job id {job_id}")
        return None if raw is None else EpochRecord.from_json(raw)

    def notes(self, job_id: int) -> IngestNotes:
        """What ingest last noted of the job (:class:`IngestNotes`; empty if nothing)."""
        raw = damage.get(self.db, layout.notes_key(job_id), f"the ingest notes of job id {job_id}")
        return IngestNotes() if raw is None else IngestNotes.from_json(raw)
