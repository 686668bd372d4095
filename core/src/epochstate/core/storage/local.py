"""The local filesystem (and anything mounted into it: NFS, a ReadWriteMany volume)."""

from __future__ import annotations

import os
from pathlib import Path

from epochstate.core.storage.base import Entry, FileStat, Storage


class LocalStorage(Storage):
    """Plain OS calls: no retries (a local read error is damage, not a passing fault)."""

    def display(self, path: str) -> str:
        return path

    def join(self, path: str, name: str) -> str:
        return os.path.join(path, name)

    def listdir(self, path: str) -> list[Entry]:
        try:
            with os.scandir(path) as entries:
                # No stat per entry: the kind comes with the listing, sizes on demand.
                return [Entry(e.name, e.is_dir(), None) for e in entries]
        except (FileNotFoundError, NotADirectoryError):
            return []

    def stat(self, path: str) -> FileStat:
        return _stat(os.stat(path))

    def is_file(self, path: str) -> bool:
        return os.path.isfile(path)

    def is_dir(self, path: str) -> bool:
        return os.path.isdir(path)

    def read(self, path: str) -> bytes:
        with open(path, "rb") as file:
            return file.read()

    def read_range(self, path: str, start: int, end: int) -> bytes:
        with open(path, "rb") as file:
            file.seek(start)
            return file.read(max(0, end - start))

    def local_file(self, path: str, immutable: bool = False) -> Path:
        if not os.path.isfile(path):
            raise FileNotFoundError(path)
        return Path(path)


def _stat(result: os.stat_result) -> FileStat:
    return FileStat(result.st_size, result.st_mtime_ns, str(result.st_mtime_ns))
