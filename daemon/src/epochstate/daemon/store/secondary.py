"""A read-only follower of a daemon's store, from another process: :class:`SecondaryStore`.

RocksDB lets other processes open a database one process writes as *secondary
instances*: each reads the primary's files (MANIFEST, write-ahead logs, tables) and
shows the state of the last :meth:`SecondaryStore.catch_up`, never a later one and
never part of a write batch. Since an epoch's changes, its record, its shapes and
the job's progress marker are one batch, a secondary that caught up past that batch
shows the whole epoch; one that did not shows none of it.

Catching up costs RocksDB most of a millisecond even when nothing changed (it reads
the primary's MANIFEST and write-ahead logs again) and holds the interpreter's lock
meanwhile, so :class:`PrimaryFiles` first looks, with a few ``stat`` calls, whether
any file a catch-up reads has changed since the last one.

A secondary writes nothing into the primary's directory (its own info log and
state go to ``workdir``): reading a store needs read access to its directory, the
same permission the daemon's Unix socket is guarded by.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

from rocksdict import AccessType, BlockBasedOptions, Cache, Options, Rdict

from epochstate.daemon.store import damage, layout
from epochstate.daemon.store.errors import LayoutMismatch, StoreError
from epochstate.daemon.store.reads import StoreReads


class NoStore(StoreError):
    """No daemon's store can be opened at the path given (missing, unreadable, not a store)."""


# A file's times have the kernel's clock tick as their grain, so a change within a tick of
# the last look may leave them as they were: until a signature's newest time is older
# than this, it is not trusted (a catch-up runs anyway).
_RACY_NS = 50_000_000

Signature = tuple[tuple[str, int, int], ...]


class PrimaryFiles:
    """What a catch-up reads of the primary's directory ``path``, by name, size and time: the
    directory itself (a flush or a compaction adds and removes files), every write-ahead
    log (each write appends to one) and the MANIFEST (each flush or compaction is
    recorded there). A write the primary makes changes one of them."""

    def __init__(self, path: Path) -> None:
        self._path = path
        self._directory_ns = -1
        self._files: tuple[str, ...] = ()

    def signature(self) -> Signature | None:
        """The files' signature now; None when it cannot be trusted to show every change
        (a time within a clock tick or so of now, or a file gone meanwhile)."""
        try:
            directory_ns = os.stat(self._path).st_mtime_ns
            if directory_ns != self._directory_ns:
                names = os.listdir(self._path)
                self._files = tuple(n for n in names if n.endswith(".log") or n.startswith("MANIFEST-"))
                self._directory_ns = directory_ns
            found = [("", 0, directory_ns)]
            for name in self._files:
                stat = os.stat(self._path / name)
                found.append((name, stat.st_size, stat.st_mtime_ns))
        except OSError:
            self._directory_ns = -1
            return None
        if max(ns for _, _, ns in found) > time.time_ns() - _RACY_NS:
            return None
        return tuple(found)


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
        self._files = PrimaryFiles(self._path)
        self._seen: Signature | None = None
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
        anything changed. Cheap when none of the primary's files did (a few ``stat``
        calls, see :class:`PrimaryFiles`).

        Raises:
            StoreDamaged: the primary's files cannot be read.
        """
        with self._lock:
            # Taken before catching up: a write meanwhile changes the next signature.
            signature = self._files.signature()
            if signature is not None and signature == self._seen:
                return False
            db = self.db
            try:
                db.try_catch_up_with_primary()
            except Exception as error:  # rocksdict raises bare exceptions
                raise damage.damaged(f"catching up with the daemon's store at {self._path}", error) from error
            self._seen = signature
            sequence = db.latest_sequence_number()
            changed = sequence != self._sequence
            self._sequence = sequence
            return changed

    def close(self) -> None:
        with self._lock:
            if self._db is not None:
                self._db.close()
                self._db = None
