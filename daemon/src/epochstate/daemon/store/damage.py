"""Where RocksDB's read errors become :class:`StoreDamaged`, for every reader of the store.

rocksdict reports a failed read in two ways. A point ``get`` raises a plain
``Exception`` (``Corruption: block checksum mismatch ...``, an I/O error). An
iterator that meets one simply stops: ``valid()`` turns False and ``key()``
None, exactly as past the last key, and only ``status()`` tells the two apart.
A reader that took the second for the end of its range would answer "absent",
return a short scan or say "no epoch yet". So every read of the store goes
through the two functions below: :func:`ended` wherever an iterator stops being
valid, :func:`get` for point reads.
"""

from __future__ import annotations

from typing import Protocol

from rocksdict import DbClosedError

from epochstate.daemon.store.errors import StoreDamaged


class _Iterator(Protocol):
    def status(self) -> None: ...


class _PointReads(Protocol):
    def get(self, key: bytes) -> bytes | None: ...


def ended(it: _Iterator, where: str) -> None:
    """``it`` stopped being valid: return if it ran past the last key, raise
    StoreDamaged if RocksDB failed (``where`` names the read for the message)."""
    try:
        it.status()
    except DbClosedError:
        raise
    except Exception as error:
        raise damaged(where, error) from error


def get(db: _PointReads, key: bytes, where: str) -> bytes | None:
    """``db.get(key)``; raises StoreDamaged instead of rocksdict's bare exception."""
    try:
        return db.get(key)
    except DbClosedError:
        raise
    except Exception as error:
        raise damaged(where, error) from error


def damaged(where: str, error: BaseException) -> StoreDamaged:
    return StoreDamaged(
        f"the daemon's store cannot be read ({where}): {error}; the store's files are damaged or "
        f"unreadable (deleting the store directory makes the daemon re-ingest the retained epochs)"
    )
