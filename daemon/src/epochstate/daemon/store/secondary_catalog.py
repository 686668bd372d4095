"""What a reader in another process may query, decided from the store alone.

Inside the daemon, ingest publishes each job's :class:`JobEntry` (its stores and their
shapes, its unavailable epochs, then its progress) to the catalog the servers read.
A process that reads the daemon's store through a :class:`SecondaryStore` has no
ingest: :class:`SecondaryCatalog` rebuilds the same entries from what the store
records, each time the secondary catches up, and publishes them in the daemon's
order (stores and unavailable epochs first, progress last).

How an epoch becomes visible to such a reader:

1. ingest writes the epoch (its versions, record, shapes, unavailable epochs and the
   job's progress marker) in one RocksDB batch;
2. the reader's secondary catches up past that batch (every ``interval``, and at once
   when a read asks for an epoch beyond what it has published);
3. the reader rebuilds the job's entry from that state and publishes it; reads
   waiting for the epoch wake.

A view handed to a read (:meth:`SecondaryCatalog.views`) shows a job's progress
capped at the published entry's: between steps 2 and 3 the secondary already holds
the epoch but the entry (its shapes) does not, and a read never answers an epoch its
entry does not describe. So a reader never answers an epoch it has not caught up to
and published, and a pinned answer is the daemon's byte for byte: the same stored
records, framed by the same service code.

What ingest knows beyond the epochs (the newest epoch committed in the checkpoint,
the epochs it is retrying and why) it records in the store as the job's notes
(:class:`~epochstate.daemon.store.descriptors.IngestNotes`) whenever they change, so a
reader refuses, explains and describes those epochs as the daemon does, as of its
last catch-up.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping

from rocksdict import Rdict

from epochstate.daemon.store.catalog import Catalog, JobEntry, StoreHandle
from epochstate.daemon.store.descriptors import JobDescriptor, JobProgress, StoreDescriptor, StoreShape
from epochstate.daemon.store.errors import StoreError
from epochstate.daemon.store.secondary import SecondaryStore
from epochstate.daemon.store.view_pool import ReadViews, SequencedView

log = logging.getLogger(__name__)

_NOTHING = JobProgress(-1, -1)


class _CappedView(SequencedView):
    """A view that shows no epoch of a job beyond the entry published for it."""

    def __init__(self, db: Rdict, published: SecondaryCatalog) -> None:
        super().__init__(db)
        self._published = published
        # The capped progress per job, for the publication it was capped at (a view is
        # reused by many reads: the cap is worked out once per job and publication).
        self._capped_at: Mapping[int, JobProgress] | None = None
        self._capped: dict[int, JobProgress] = {}

    def progress(self, job_id: int) -> JobProgress:
        published = self._published.published
        if published is self._capped_at:
            known = self._capped.get(job_id)
            if known is not None:
                return known
        else:
            self._capped_at, self._capped = published, {}
        own = super().progress(job_id)
        cap = published.get(job_id, _NOTHING)
        if own.empty or cap.newest >= own.newest:
            capped = own
        elif cap.newest < own.oldest:  # published long before retention moved: nothing both show
            capped = _NOTHING
        else:
            capped = JobProgress(cap.newest, own.oldest)
        self._capped[job_id] = capped
        return capped


class _CappedViews(ReadViews):
    def __init__(self, catalog: SecondaryCatalog) -> None:
        super().__init__(catalog.store)
        self._catalog = catalog

    def _fresh(self, db: Rdict) -> SequencedView:
        return _CappedView(db, self._catalog)


class SecondaryCatalog:
    """A :class:`Catalog` of the jobs a :class:`SecondaryStore` shows, kept up to date.

    :attr:`catalog` and :attr:`views` take the place of the daemon's catalog and read
    views for a service reading ``store``. :attr:`published` maps each job id to the
    progress of its published entry; it is replaced whole (one assignment), never
    changed in place.
    """

    def __init__(self, store: SecondaryStore, interval: float = 0.02) -> None:
        self.store = store
        self.catalog = Catalog()
        self.published: Mapping[int, JobProgress] = {}
        self.views = _CappedViews(self)
        self._interval = interval
        self._lock = threading.Lock()  # one catch-up and publication at a time
        self._handles: dict[tuple[int, int], StoreHandle] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._publish()

    def catch_up(self) -> None:
        """Catch the store up with the daemon's and publish what changed.

        Raises:
            StoreDamaged: the daemon's files cannot be read.
        """
        with self._lock:
            if self.store.catch_up():
                self._publish()

    def start(self) -> None:
        """Catch up every ``interval`` seconds in a thread of its own, until :meth:`close`."""
        self._thread = threading.Thread(target=self._run, name="secondary-catch-up", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            try:
                self.catch_up()
            except StoreError as error:
                log.error("%s", error)  # reads fail with it too; keep trying

    def close(self) -> None:
        """Stop catching up, wake every waiting read (they fail SHUTTING_DOWN), close the store."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self.catalog.close()
        self.views.clear()
        self.store.close()

    # -- publication ---------------------------------------------------------------

    def _publish(self) -> None:
        store = self.store
        found: dict[str, tuple[JobEntry, JobProgress]] = {}
        for descriptor in store.jobs():
            found[descriptor.name] = self._entry(descriptor)
        current = {entry.descriptor.name: entry for entry in self.catalog.jobs()}
        progress: dict[int, JobProgress] = {}
        for name, (fresh, newest) in found.items():
            entry = current.get(name)
            if entry is not None and entry.descriptor.job_id == fresh.descriptor.job_id:
                # Stores and unavailable epochs before progress, as ingest publishes them.
                entry.descriptor = fresh.descriptor
                entry.stores = fresh.stores
                entry.operator_names = fresh.operator_names
                entry.unavailable = fresh.unavailable
                entry.problems = fresh.problems
                entry.committed = fresh.committed
            progress[fresh.descriptor.job_id] = newest
        # Views may show the new progress from here on: every entry describes it.
        self.published = progress
        for name, (fresh, newest) in found.items():
            entry = current.get(name)
            if entry is not None and entry.descriptor.job_id == fresh.descriptor.job_id:
                if entry.progress != newest:
                    self.catalog.advance(name, newest)
            else:
                fresh.progress = newest
                self.catalog.put(fresh)
        for name in current.keys() - found.keys():
            self.catalog.remove(name)

    def _entry(self, descriptor: JobDescriptor) -> tuple[JobEntry, JobProgress]:
        """``descriptor``'s job as the store shows it, and its progress (not yet in the entry)."""
        store = self.store
        stores: dict[tuple[int, str], StoreHandle] = {}
        names: dict[int, str] = {}
        for store_descriptor in store.stores(descriptor.name):
            shapes = store.shapes(store_descriptor)
            stores[(store_descriptor.operator_id, store_descriptor.store_name)] = self._handle(
                shapes, store_descriptor
            )
            names[store_descriptor.operator_id] = store_descriptor.operator_name
        unavailable = store.unavailable(descriptor.job_id)
        notes = store.notes(descriptor.job_id)
        entry = JobEntry(
            descriptor,
            stores=stores,
            operator_names=names,
            problems={**notes.problems, **unavailable},
            unavailable=unavailable,
        )
        progress = store.progress(descriptor.job_id)
        entry.committed = max(notes.committed, progress.newest)
        return entry, progress

    def _handle(self, shapes: list[StoreShape], descriptor: StoreDescriptor) -> StoreHandle:
        key = (descriptor.store_id, len(shapes))
        handle = self._handles.get(key)
        if handle is None or handle.descriptor != descriptor:
            # Parsed once per shape: schemas are parsed JSON, and a store gains a shape rarely.
            handle = self._handles[key] = StoreHandle.of(descriptor, shapes)
        return handle
