"""A read-only follower of a daemon's store, from another process: :class:`SecondaryStore`.

RocksDB lets other processes open a database one process writes as *secondary
instances*: each reads the primary's files (MANIFEST, write-ahead logs, tables) and
shows the state of the last :meth:`SecondaryStore.catch_up`, never a later one and
never part of a write batch. Since an epoch's changes, its record, its shapes and
the job's progress marker are one batch, a secondary that caught up past that batch
shows the whole epoch; one that did not shows none of it.

A secondary writes nothing into the primary's directory (its own info log and
state go to ``workdir``): reading a store needs read access to its directory, the
same permission the daemon's Unix socket is guarded by.
"""

from __future__ import annotations

import threading
from pathlib import Path

from rocksdict import AccessType, BlockBasedOptions, Cache, Options, Rdict

from epochstate.daemon.store import damage, layout
from epochstate.daemon.store.errors import LayoutMismatch, StoreError
from epochstate.daemon.store.reads import StoreReads


class NoStore(StoreError):
    """No daemon's store can be opened at the path given (missing, unreadable, not a store)."""


class SecondaryStore(StoreReads):
    """The daemon's store at ``path`` as of the last :meth:`catch_up` (read-only).

    Thread-safe: reads may run while another thread catches up; each read (a view, a
    point read) sees the state before or after a catch-up, never a mix.
    """

    def __init__(self, path: Path | str, workdir: Path | str, block_cache_mb: int = 64) -> None:
        """Open the store the daemon writes at ``path``; ``workdir`` holds this
        instance's own files (an empty directory of the caller's, removed by the caller).

        Raises:
            NoStore: no store can be opened at ``path``.
            LayoutMismatch: the store has another layout version than this release reads.
        """
        if not (Path(path) / "CURRENT").is_file():
            raise NoStore(f"no daemon's store at {path} (no RocksDB CURRENT file there, or it is unreadable)")
        opts = Options(raw_mode=True)
        # A secondary keeps every table file it uses open: the primary deletes the files
        # compaction made obsolete, and an open file stays readable after its unlink.
        opts.set_max_open_files(-1)
        table = BlockBasedOptions()
        table.set_block_cache(Cache(block_cache_mb << 20))
        opts.set_block_based_table_factory(table)
        Path(workdir).mkdir(parents=True, exist_ok=True)
        try:
            self._db = Rdict(str(path), opts, access_type=AccessType.secondary(str(workdir)))
        except Exception as error:  # rocksdict raises bare exceptions
            raise NoStore(f"cannot open the daemon's store at {path} for reading: {error}") from error
        self._path = Path(path)
        self._lock = threading.Lock()
        self._sequence = self.db.latest_sequence_number()
        stamped = damage.get(self.db, layout.LAYOUT, "the layout version")
        found = "none" if stamped is None else bytes(stamped).decode()
        if found != str(layout.LAYOUT_VERSION):
            self.close()
            raise LayoutMismatch(
                f"the store at {path} has layout version {found}; this release reads version "
                f"{layout.LAYOUT_VERSION} (run the epochstate release of the daemon that writes it)"
            )

    @property
    def sequence(self) -> int:
        """The primary's write sequence number this instance shows."""
        return self._sequence

    def catch_up(self) -> bool:
        """Show every write the primary has logged so far; whether
        anything changed. Cheap when nothing did (a few microseconds).

        Raises:
            StoreDamaged: the primary's files cannot be read.
        """
        with self._lock:
            db = self.db
            try:
                db.try_catch_up_with_primary()
            except Exception as error:  # rocksdict raises bare exceptions
                raise damage.damaged(f"catching up with the daemon's store at {self._path}", error) from error
            sequence = db.latest_sequence_number()
            changed = sequence != self._sequence
            self._sequence = sequence
            return changed

    def close(self) -> None:
        with self._lock:
            if self._db is not None:
                self._db.close()
                self._db = None
