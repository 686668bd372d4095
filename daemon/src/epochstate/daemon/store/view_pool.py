"""Store views for reads, reused while the store is unchanged.

A read needs a view (a RocksDB snapshot and an iterator over it). Inside the
daemon, making one and its first seek were the largest single cost of a Get under
load (a hot loop hides it). A
snapshot taken at write sequence ``s`` shows exactly what a snapshot taken later
shows as long as nothing was written since, so a view is handed to the next read
when the store's latest sequence number is still the one it was taken at. Every
write (an ingested epoch, retention) changes the number; the next read then gets a
fresh view, so a read never sees an older state than a fresh view would show.

A view serves one read at a time (its iterator is not shared): idle views wait in
a stack, at most one per concurrent read.
"""

from __future__ import annotations

from rocksdict import Rdict

from epochstate.daemon.store.descriptors import EpochRecord
from epochstate.daemon.store.errors import StoreClosed
from epochstate.daemon.store.reads import StoreReads
from epochstate.daemon.store.view import StoreView


class SequencedView(StoreView):
    """A view that knows the store's write sequence number it shows."""

    def __init__(self, db: Rdict) -> None:
        # Taken before the snapshot: a write in between makes the view newer than
        # ``sequence`` says, which only costs a needless refresh.
        self.sequence: int = db.latest_sequence_number()
        super().__init__(db)


class ReadViews:
    """Views of ``store`` for reads; give each back with :meth:`done` after the read."""

    def __init__(self, store: StoreReads) -> None:
        self._store = store
        self._idle: list[SequencedView] = []  # list.pop/append are atomic: no lock

    def _fresh(self, db: Rdict) -> SequencedView:
        """A new view of ``db`` (a subclass may show less of it)."""
        return SequencedView(db)

    def view(self) -> StoreView:
        """A view showing the store's current state (StoreClosed once it is closed)."""
        db = self._store.db
        try:
            view = self._idle.pop()
        except IndexError:
            return self._fresh(db)
        if view.sequence == db.latest_sequence_number():
            return view
        return self._fresh(db)

    def done(self, view: StoreView) -> None:
        """``view`` is free for the next read (a stale one is dropped; never raises)."""
        try:
            current = self._store.db.latest_sequence_number()
        except StoreClosed:
            return
        if isinstance(view, SequencedView) and view.sequence == current:
            self._idle.append(view)

    def epochs(self, job_id: int, from_epoch: int = 0, limit: int = 0) -> list[EpochRecord]:
        return self._store.epochs(job_id, from_epoch, limit)

    def clear(self) -> None:
        """Drop the idle views (before the store closes: they hold snapshots)."""
        self._idle.clear()
