"""S3 through obstore, the Python binding of the Rust ``object_store`` crate.

Chosen over s3fs for S3 by measurement (``bench/storage_clients.py``, one moto
server, interleaved rounds): per request several times less time and CPU than
s3fs through fsspec, and a whole-object GET at the server's speed where s3fs
reaches a fraction of it. GCS and Azure stay on fsspec (:mod:`remote`).

Credentials and the endpoint come from the standard environment variables
(``AWS_ACCESS_KEY_ID``, ``AWS_ENDPOINT_URL``, ...) and profiles, read by
``object_store`` itself; nothing here reads, stores or logs them. The crate's
own retries are off: this layer retries (:mod:`retry`), so every request is
counted once and a fault is not retried twice over.
"""

from __future__ import annotations

import datetime as dt
import os
import threading
from collections.abc import Mapping
from typing import Any, cast

from epochstate.core.storage.base import Entry, FileStat
from epochstate.core.storage.cache import FileCache
from epochstate.core.storage.remote import REFUSALS, RemoteStorage
from epochstate.core.storage.retry import RetryPolicy
from epochstate.core.storage.stats import StorageStats

try:
    import obstore
    from obstore.exceptions import (
        InvalidPathError,
        NotSupportedError,
        PermissionDeniedError,
        UnauthenticatedError,
    )
    from obstore.store import S3Store

    _AVAILABLE = True
except ImportError:  # the s3 extra is not installed: the factory says which to install
    _AVAILABLE = False

#: Seconds one S3 request may take, its body included, unless configured otherwise.
DEFAULT_REQUEST_TIMEOUT = 30.0


def s3_options(request_timeout: float = DEFAULT_REQUEST_TIMEOUT) -> dict[str, Any]:
    """obstore's client settings: a request past ``request_timeout`` seconds is
    abandoned (and retried by :mod:`retry`); the crate's own retries are off."""
    return {
        "client_options": {"connect_timeout": "5s", "timeout": f"{int(request_timeout * 1000)}ms"},
        "retry_config": {"max_retries": 0, "retry_timeout": dt.timedelta(seconds=request_timeout)},
    }


DEFAULT_S3_OPTIONS: dict[str, Any] = s3_options()


def _bucket_known(call: Any, *args: Any) -> Any:
    """``call(*args)``, with S3's ``NoSuchBucket`` (which obstore reports as a generic
    error) raised as :class:`FileNotFoundError`: a permanent answer, not a fault to retry."""
    try:
        return call(*args)
    except Exception as error:
        if "<Code>NoSuchBucket</Code>" in str(error):
            raise FileNotFoundError(f"no such bucket: {error}".splitlines()[0]) from None
        raise


def available() -> bool:
    """Whether obstore is installed."""
    return _AVAILABLE


class ObjectStoreStorage(RemoteStorage):
    """S3 buckets through obstore; paths are ``bucket/key``, as for :class:`RemoteStorage`."""

    def __init__(
        self,
        scheme: str,
        *,
        options: Mapping[str, Any] | None = None,
        stats: StorageStats | None = None,
        retry: RetryPolicy | None = None,
        cache: FileCache | None = None,
    ) -> None:
        super().__init__(None, scheme, stats=stats, retry=retry, cache=cache)
        self.refusals = (
            *REFUSALS,
            PermissionDeniedError,
            UnauthenticatedError,
            InvalidPathError,
            NotSupportedError,
        )
        self._options = dict(DEFAULT_S3_OPTIONS if options is None else options)
        self._stores: dict[str, Any] = {}
        self._lock = threading.Lock()

    def _store(self, path: str) -> tuple[Any, str]:
        bucket, _, key = path.partition("/")
        with self._lock:
            store = self._stores.get(bucket)
            if store is None:
                client = dict(self._options.get("client_options") or {})
                endpoint = os.environ.get("AWS_ENDPOINT_URL") or os.environ.get("AWS_ENDPOINT") or ""
                if endpoint.startswith("http://"):
                    client.setdefault("allow_http", True)
                store = S3Store(
                    bucket,
                    client_options=cast(Any, client),
                    retry_config=self._options.get("retry_config"),
                )
                self._stores[bucket] = store
        return store, key

    def listdir(self, path: str) -> list[Entry]:
        store, key = self._store(path)
        prefix = key.rstrip("/")
        try:
            found = self._call(
                "list", path, lambda: _bucket_known(obstore.list_with_delimiter, store, prefix or None)
            )
        except FileNotFoundError:  # no such bucket: nothing under it, as for a missing prefix
            return []
        start = len(prefix) + 1 if prefix else 0
        entries = [Entry(p[start:].rstrip("/"), True, None) for p in found["common_prefixes"]]
        entries.extend(Entry(meta["path"][start:], False, _stat(meta)) for meta in found["objects"])
        return [e for e in entries if e.name and "/" not in e.name]

    def stat(self, path: str) -> FileStat:
        store, key = self._store(path)
        return _stat(self._call("head", path, lambda: _bucket_known(obstore.head, store, key)))

    def is_file(self, path: str) -> bool:
        try:
            self.stat(path)
        except FileNotFoundError:
            return False
        return True

    def _read_whole(self, path: str) -> bytes:
        store, key = self._store(path)
        data = self._call("get", path, lambda: bytes(_bucket_known(obstore.get, store, key).bytes()))
        self.stats.add("bytes", len(data))
        return data

    def read_range(self, path: str, start: int, end: int) -> bytes:
        if end <= start:
            return b""
        store, key = self._store(path)
        data = self._call(
            "get_range", path, lambda: bytes(obstore.get_range(store, key, start=start, end=end))
        )
        self.stats.add("bytes", len(data))
        return data


def _stat(meta: Mapping[str, Any]) -> FileStat:
    modified = meta.get("last_modified")
    seconds = int(modified.timestamp()) if isinstance(modified, dt.datetime) else 0
    tag = meta.get("e_tag") or meta.get("version") or str(seconds)
    return FileStat(int(meta.get("size") or 0), seconds * 1_000_000_000, str(tag))
