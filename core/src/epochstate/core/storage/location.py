"""A file or directory of a checkpoint, wherever it is: :class:`Location`.

``open_location(uri)`` accepts what users give Spark: a plain path, ``file:``,
``s3a://`` / ``s3n://`` / ``s3://``, ``gs://``, ``abfs://`` / ``abfss://``,
``hdfs://`` (read over WebHDFS) and ``[s]webhdfs://`` (see :mod:`uris`). Remote
schemes need their fsspec implementation (extras ``s3``, ``gcs``, ``azure``;
WebHDFS comes with fsspec).
"""

from __future__ import annotations

import os
import tempfile
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

from epochstate.core.storage.base import Entry, FileStat, Storage
from epochstate.core.storage.cache import FileCache
from epochstate.core.storage.errors import UnsupportedLocation
from epochstate.core.storage.local import LocalStorage
from epochstate.core.storage.objectstore import DEFAULT_S3_OPTIONS, ObjectStoreStorage
from epochstate.core.storage.objectstore import available as obstore_available
from epochstate.core.storage.remote import RemoteStorage
from epochstate.core.storage.retry import RetryPolicy
from epochstate.core.storage.stats import StorageStats
from epochstate.core.storage.uris import RemoteTarget, parse_remote, redact

__all__ = ["FileStat", "Location", "StorageFactory", "open_location", "redact"]


@dataclass(frozen=True)
class Location:
    """A path on a :class:`Storage`, used like :class:`pathlib.Path` by the readers.

    Values are immutable; ``/`` joins a name. A location from :meth:`iterdir`
    remembers what the listing said of it (kind, size, mtime), so asking again
    costs no request.
    """

    storage: Storage = field(compare=True)
    path: str
    _entry: Entry | None = field(default=None, compare=False, repr=False)

    def __str__(self) -> str:
        return self.storage.display(self.path)

    def __truediv__(self, name: str | int) -> Location:
        return Location(self.storage, self.storage.join(self.path, str(name)))

    @property
    def name(self) -> str:
        return self.path.rstrip("/").rsplit("/", 1)[-1]

    @property
    def parent(self) -> Location:
        head = self.path.rstrip("/").rsplit("/", 1)[0] if "/" in self.path.rstrip("/") else ""
        return Location(self.storage, head)

    @property
    def suffix(self) -> str:
        name = self.name
        dot = name.rfind(".")
        return name[dot:] if 0 < dot < len(name) - 1 else ""

    @property
    def is_local(self) -> bool:
        return isinstance(self.storage, LocalStorage)

    @property
    def mtime_resolution_ns(self) -> int:
        return self.storage.mtime_resolution_ns

    def iterdir(self) -> Iterator[Location]:
        """The directory's entries (none when it does not exist): one listing request."""
        for entry in self.storage.listdir(self.path):
            yield Location(self.storage, self.storage.join(self.path, entry.name), entry)

    def names(self) -> list[str]:
        """The names in the directory ([] when it does not exist)."""
        return [entry.name for entry in self.storage.listdir(self.path)]

    def is_file(self) -> bool:
        if self._entry is not None:
            return not self._entry.is_dir
        return self.storage.is_file(self.path)

    def is_dir(self) -> bool:
        if self._entry is not None:
            return self._entry.is_dir
        return self.storage.is_dir(self.path)

    def exists(self) -> bool:
        return self.is_file() or self.is_dir()

    @property
    def listed_stat(self) -> FileStat | None:
        """What the listing this location came from said of the file (object stores
        give size, time and tag for free); ``None`` otherwise. Costs no request."""
        return self._entry.stat if self._entry is not None else None

    def stat(self) -> FileStat:
        if self._entry is not None and self._entry.stat is not None:
            return self._entry.stat
        return self.storage.stat(self.path)

    def read_bytes(self) -> bytes:
        return self.storage.read(self.path)

    def read_text(self, encoding: str = "utf-8") -> str:
        return self.read_bytes().decode(encoding)

    def read_range(self, start: int, end: int) -> bytes:
        return self.storage.read_range(self.path, start, end)

    def local_path(self, immutable: bool = False) -> Path:
        """A local file with this file's content (see :meth:`Storage.local_file`)."""
        return self.storage.local_file(self.path, immutable)


class StorageFactory:
    """Opens locations, one storage per remote filesystem, sharing a file cache and
    request counters."""

    def __init__(
        self,
        cache_dir: Path | None = None,
        cache_bytes: int = 2 << 30,
        retry: RetryPolicy | None = None,
        options: dict[str, dict[str, Any]] | None = None,
    ) -> None:
        self.stats = StorageStats()
        self.retry = retry or RetryPolicy()
        self._cache_dir = cache_dir
        self._cache_bytes = cache_bytes
        self._cache: FileCache | None = None
        # Our layer retries (counted, bounded, with jitter): the clients' own retries
        # stay few so that a fault is not retried several times over.
        self._options = {**_CLIENT_DEFAULTS, **(options or {})}
        self._local = LocalStorage()
        self._remote: dict[tuple[str, str, str, str], RemoteStorage] = {}
        self._lock = threading.Lock()

    def _file_cache(self) -> FileCache:
        if self._cache is None:
            directory = self._cache_dir or Path(tempfile.mkdtemp(prefix="epochstate-cache-"))
            self._cache = FileCache(directory, self._cache_bytes)
        return self._cache

    def open(self, uri: str | os.PathLike[str]) -> Location:
        """The location of ``uri``.

        Raises:
            UnsupportedLocation: an unknown scheme, credentials in the URI, or a
                scheme whose fsspec implementation is not installed.
        """
        text = os.fspath(uri)
        if "://" not in text and not text.startswith("file:"):
            return Location(self._local, text)
        if text.startswith("file:"):
            parsed = urlsplit(text)
            if parsed.netloc not in ("", "localhost"):
                raise UnsupportedLocation(f"checkpoint {redact(text)!r}: file URI with a remote host")
            return Location(self._local, unquote(parsed.path))
        try:
            target = parse_remote(text)
        except ValueError:  # a port that is not a number
            raise UnsupportedLocation(f"checkpoint {redact(text)!r}: not a valid URI") from None
        return Location(self._storage(target), target.path)

    def _storage(self, target: RemoteTarget) -> RemoteStorage:
        extra = dict(target.options)
        key = (target.protocol, target.scheme, target.authority, repr(sorted(extra.items())))
        with self._lock:
            storage = self._remote.get(key)
            if storage is None and target.protocol == "s3":
                # S3 through obstore (see objectstore for the measurement behind it).
                if not obstore_available():
                    raise UnsupportedLocation(
                        f"{target.scheme}:// checkpoints need obstore: pip install 'epochstate[s3]'"
                    )
                storage = ObjectStoreStorage(
                    target.scheme,
                    options=self._options.get("s3", DEFAULT_S3_OPTIONS),
                    stats=self.stats,
                    retry=self.retry,
                    cache=self._file_cache(),
                )
                self._remote[key] = storage
            if storage is None:
                storage = _TargetStorage(
                    target,
                    _filesystem(target.protocol, {**self._options.get(target.protocol, {}), **extra}),
                    stats=self.stats,
                    retry=self.retry,
                    cache=self._file_cache(),
                )
                self._remote[key] = storage
            return storage


class _TargetStorage(RemoteStorage):
    """A remote storage whose paths show as the user wrote them: with the Azure
    account host or the NameNode address that its filesystem's paths leave out."""

    def __init__(self, target: RemoteTarget, fs: Any, **kwargs: Any) -> None:
        super().__init__(fs, target.scheme, **kwargs)
        self.target = target

    def display(self, path: str) -> str:
        return self.target.display(path)


def _filesystem(protocol: str, options: dict[str, Any]) -> Any:
    try:
        import fsspec
    except ImportError:
        raise UnsupportedLocation(
            f"{protocol}:// checkpoints need fsspec: pip install 'epochstate[s3]' (or gcs, azure, hdfs)"
        ) from None
    try:
        # No instance or listing cache: a new epoch's files must show up at once.
        return fsspec.filesystem(protocol, skip_instance_cache=True, use_listings_cache=False, **options)
    except (ImportError, ValueError) as error:
        raise UnsupportedLocation(f"{protocol}:// checkpoints: {error}") from None


_CLIENT_DEFAULTS: dict[str, dict[str, Any]] = {"s3": DEFAULT_S3_OPTIONS}

_default = StorageFactory()


def default_factory() -> StorageFactory:
    """The process's factory (the daemon sets it up once with :func:`configure`)."""
    return _default


def configure(factory: StorageFactory) -> None:
    """Make ``factory`` the process's (call at start-up, before opening locations)."""
    global _default
    _default = factory


def open_location(root: str | os.PathLike[str] | Location) -> Location:
    """``root`` as a location, opened through the process's factory."""
    if isinstance(root, Location):
        return root
    return _default.open(root)
