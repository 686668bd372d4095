"""What a storage does: the few operations reading a checkpoint needs."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class FileStat:
    """A file's size, modification time and version tag. ``st_mtime_ns`` has the
    storage's resolution (:attr:`Storage.mtime_resolution_ns`): 1 s on S3, for
    example. ``tag`` changes whenever the content may have (an object's ETag; the
    mtime in ns locally), so (size, tag) tells a rewritten file apart."""

    st_size: int
    st_mtime_ns: int
    tag: str = ""


@dataclass(frozen=True)
class Entry:
    """One name in a directory listing."""

    name: str
    is_dir: bool
    stat: FileStat | None  # when the listing gave it for free (object stores); else None


class Storage(ABC):
    """A filesystem holding checkpoints. Paths are the storage's own strings
    (an OS path locally; ``bucket/key`` on an object store), joined with ``/``.

    Every method raises ``FileNotFoundError`` for a file that does not exist,
    :class:`~epochstate.core.storage.errors.UnreadableFile` for one the storage
    refuses, and :class:`~epochstate.core.storage.errors.StorageUnavailable` when
    the storage did not answer after its retries. Nothing is ever written.
    """

    #: The unit modification times come in (object stores: whole seconds).
    mtime_resolution_ns: int = 1

    @abstractmethod
    def display(self, path: str) -> str:
        """The path as a user wrote it (a URI for remote storage), for messages."""

    @abstractmethod
    def listdir(self, path: str) -> list[Entry]:
        """The entries of a directory, in no order; [] when it does not exist."""

    @abstractmethod
    def stat(self, path: str) -> FileStat:
        """The file's size and modification time."""

    @abstractmethod
    def is_file(self, path: str) -> bool:
        """Whether a file exists at ``path``."""

    @abstractmethod
    def is_dir(self, path: str) -> bool:
        """Whether a directory exists at ``path`` (on object stores: a prefix with objects)."""

    @abstractmethod
    def read(self, path: str) -> bytes:
        """The whole file."""

    def read_ahead(self, path: str) -> None:
        """Start reading the whole file now: a later :meth:`read` of it takes what was
        read. Only for files that never change once written. A no-op where reads are
        cheap (the local disk)."""
        return None

    @abstractmethod
    def read_range(self, path: str, start: int, end: int) -> bytes:
        """Bytes ``[start, end)`` of the file (fewer at its end)."""

    @abstractmethod
    def local_file(self, path: str, immutable: bool = False) -> Path:
        """A local file with the file's content: the file itself on local storage, a
        cached copy otherwise (valid until the next call for another file may evict it).

        ``immutable``: the caller knows the file is never rewritten under its name
        (a name with a unique id), so a cached copy is used without asking the
        storage whether the file changed."""

    def join(self, path: str, name: str) -> str:
        return f"{path.rstrip('/')}/{name}" if path else name
