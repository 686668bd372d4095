"""Object stores and remote filesystems through fsspec: S3 (s3fs), GCS (gcsfs),
Azure (adlfs), WebHDFS (fsspec's own), each an optional extra.

Credentials come from each implementation's standard chain (environment variables
such as ``AWS_ENDPOINT_URL``, profiles, workload identity); nothing here reads,
stores or logs them. Listings are never cached (new epochs must show up), every
request is counted in :class:`StorageStats`, transient faults are retried
(:mod:`retry`) and whole-file reads of large files go through the local
:class:`FileCache`.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar

from epochstate.core.storage.base import Entry, FileStat, Storage
from epochstate.core.storage.cache import FileCache
from epochstate.core.storage.errors import StorageUnavailable, UnreadableFile
from epochstate.core.storage.readahead import ReadAhead
from epochstate.core.storage.retry import RetryPolicy, with_retries
from epochstate.core.storage.stats import StorageStats

log = logging.getLogger(__name__)
T = TypeVar("T")

# Errors that say something about the file, not about the storage's health.
REFUSALS: tuple[type[BaseException], ...] = (
    PermissionError,
    IsADirectoryError,
    NotADirectoryError,
    ValueError,
)


# Our own mistakes: never retried, never reported as the storage's fault.
_BUGS = (TypeError, AttributeError, NameError, ImportError, AssertionError, NotImplementedError)


def retried_by_its_client(fs: Any) -> Callable[[BaseException], bool]:
    """Which errors ``fs``'s own client has already retried before raising them.

    Retrying those again multiplies the client's back-off by ours: gcsfs retries
    every HTTP error it deems transient six times with exponential back-off (a
    refused token exchange among them), so a daemon given a wrong GCS key took twice
    that, about 70 s, to say so. Such an error is reported at once, as unavailable.
    """
    if type(fs).__module__.split(".", 1)[0] == "gcsfs":
        from gcsfs.retry import is_retriable

        return is_retriable  # type: ignore[no-any-return]
    return lambda _: False


def credentials_check(fs: Any) -> Callable[[], None]:
    """What to run before each request of ``fs``: raise at once if its credentials are refused.

    gcsfs turns any failed token refresh into an HTTP 401 it retries six times with
    back-off, a token endpoint that refuses the key for good included: a daemon given
    a wrong GCS key waited about 35 s to say so. So the credentials are refreshed here
    first (a no-op while the token is valid), and a refusal that google-auth marks as
    not retryable ends the request; a transient one is left to gcsfs's retries.
    """
    if type(fs).__module__.split(".", 1)[0] != "gcsfs":
        return lambda: None
    from google.auth.exceptions import RefreshError

    def check() -> None:
        try:
            fs.credentials.maybe_refresh()
        except Exception as error:
            refused = error.__cause__ if isinstance(error.__cause__, RefreshError) else error
            if isinstance(refused, RefreshError) and not refused.retryable:
                raise
            log.debug("refreshing GCS credentials: %s; left to gcsfs's retries", type(error).__name__)

    return check


class RemoteStorage(Storage):
    """One fsspec filesystem (``protocol``) and the URI prefix its paths display with."""

    mtime_resolution_ns = 1_000_000_000
    #: Errors that refuse the file (not retried; reported as UnreadableFile).
    refusals: tuple[type[BaseException], ...] = REFUSALS

    def __init__(
        self,
        fs: Any,
        scheme: str,
        *,
        stats: StorageStats | None = None,
        retry: RetryPolicy | None = None,
        cache: FileCache | None = None,
    ) -> None:
        self.fs = fs
        self.scheme = scheme
        self.stats = stats or StorageStats()
        self.retry = retry or RetryPolicy()
        self.cache = cache
        self._ahead = ReadAhead(self._read_whole)
        self._retried_by_client = retried_by_its_client(fs)
        self._check_credentials = credentials_check(fs)

    def display(self, path: str) -> str:
        return f"{self.scheme}://{path}"

    def _call(self, op: str, path: str, call: Callable[[], T]) -> T:
        def counted() -> T:
            self.stats.request(op, path)
            self._check_credentials()
            return call()

        def retried(error: BaseException) -> None:
            self.stats.add("retries")
            log.debug("%s %s: %s; retrying", op, self.display(path), type(error).__name__)

        def transient(error: BaseException) -> bool:
            if isinstance(error, (FileNotFoundError, *self.refusals, *_BUGS)):
                return False
            return not self._retried_by_client(error)

        try:
            return with_retries(counted, transient, self.retry, on_retry=retried)
        except (FileNotFoundError, *_BUGS):
            raise
        except self.refusals as error:
            self.stats.add("refused")
            raise UnreadableFile(f"{self.display(path)}: {type(error).__name__}: {error}") from None
        except Exception as error:
            self.stats.add("failed")
            raise StorageUnavailable(
                f"{self.display(path)}: {op} failed after retries: {type(error).__name__}: {error}"
            ) from None

    def listdir(self, path: str) -> list[Entry]:
        def ls() -> list[dict[str, Any]]:
            try:
                return list(self.fs.ls(path, detail=True, refresh=True))
            except FileNotFoundError:
                return []

        entries = []
        prefix = path.rstrip("/") + "/"
        for info in self._call("list", path, ls):
            name = str(info["name"]).rstrip("/")
            if name.startswith(prefix):
                name = name[len(prefix) :]
            if not name or "/" in name:
                continue
            if info.get("type") == "directory":
                entries.append(Entry(name, True, None))
            else:
                entries.append(Entry(name, False, _stat(info)))
        return entries

    def _info(self, path: str) -> Mapping[str, Any]:
        return dict(self._call("head", path, lambda: self.fs.info(path)))

    def stat(self, path: str) -> FileStat:
        info = self._info(path)
        if info.get("type") == "directory":
            raise IsADirectoryError(self.display(path))
        return _stat(info)

    def is_file(self, path: str) -> bool:
        try:
            return self._info(path).get("type") != "directory"
        except FileNotFoundError:
            return False

    def is_dir(self, path: str) -> bool:
        return bool(self.listdir(path))

    def read(self, path: str) -> bytes:
        early = self._ahead.take(path)
        return early if early is not None else self._read_whole(path)

    def read_ahead(self, path: str) -> None:
        self._ahead.start(path)

    def _read_whole(self, path: str) -> bytes:
        data: bytes = self._call("get", path, lambda: self.fs.cat_file(path))
        self.stats.add("bytes", len(data))
        return data

    def read_range(self, path: str, start: int, end: int) -> bytes:
        data: bytes = self._call("get_range", path, lambda: self.fs.cat_file(path, start=start, end=end))
        self.stats.add("bytes", len(data))
        return data

    def local_file(self, path: str, immutable: bool = False) -> Path:
        if self.cache is None:
            raise UnreadableFile(f"{self.display(path)}: no local cache to fetch it into")
        if immutable:
            key = self.display(path)
        else:
            stat = self.stat(path)
            key = f"{self.display(path)}|{stat.st_size}|{stat.tag}"

        def fetch(target: Path) -> None:
            target.write_bytes(self.read(path))

        cached, hit = self.cache.get(key, fetch)
        self.stats.add("cache_hits" if hit else "cache_misses")
        return cached


def _stat(info: Mapping[str, Any]) -> FileStat:
    mtime = _mtime_ns(info)
    tag = info.get("ETag") or info.get("etag") or info.get("md5Hash") or info.get("content_settings") or mtime
    return FileStat(int(info.get("size") or 0), mtime, str(tag))


def _mtime_ns(info: Mapping[str, Any]) -> int:
    for key in ("LastModified", "mtime", "last_modified", "updated", "modified", "modificationTime"):
        value = info.get(key)
        if value is None:
            continue
        if isinstance(value, dt.datetime):
            if value.tzinfo is None:
                value = value.replace(tzinfo=dt.timezone.utc)
            return int(value.timestamp()) * 1_000_000_000
        if isinstance(value, (int, float)):
            # WebHDFS gives ms; others seconds.
            seconds = value / 1000 if key == "modificationTime" else value
            return int(seconds) * 1_000_000_000
        if isinstance(value, str):
            parsed = dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
            return int(parsed.timestamp()) * 1_000_000_000
    return 0
