"""A local Spark checkpoint copied to a checkpoint store as Spark writes it.

The pyspark wheel ships no connector for object stores or HDFS, so Spark writes
locally and the mirror copies each file in Spark's order: within every pass, state
and log files before any new ``commits/<n>`` (Spark commits an epoch only after its
state files are written); a store that takes several puts at once
(``concurrent_puts``) gets the other files concurrently, and a commit only once they
are all in. Temporary and hidden files are never uploaded (Hadoop's object store
connectors write an object once, at close); files Spark deletes are deleted. The
daemon under test only ever sees the store's URI.
"""

from __future__ import annotations

import os
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

from epochstate.devtools.stores.base import CheckpointStore


def _uploadable(relative: str) -> bool:
    parts = relative.split("/")
    return not any(p.startswith(".") or ".tmp" in p or p.endswith(".crc") for p in parts)


def _is_commit(relative: str) -> bool:
    return relative.startswith("commits/")


class CheckpointMirror:
    """Copies ``local`` to ``prefix`` in ``bucket`` of ``store`` in Spark's order, in a
    thread, until :meth:`stop` (which does a last full pass). :attr:`uri` is what a
    daemon follows."""

    def __init__(
        self,
        store: CheckpointStore,
        local: Path,
        bucket: str,
        prefix: str,
        interval: float = 0.05,
        uri: str | None = None,
    ):
        self.store = store
        self.local = local
        self.bucket = bucket
        self.prefix = prefix.strip("/")
        self.interval = interval
        self.uri = uri or store.uri(bucket, self.prefix)
        self._seen: dict[str, tuple[int, int]] = {}
        self._lock = threading.Lock()  # _seen, _in_flight and uploads, updated by concurrent puts
        # A store that takes several puts at once gets each file as soon as a pass finds
        # it, without waiting for the puts of earlier passes; a commit waits for them all.
        self._puts = (
            ThreadPoolExecutor(store.concurrent_puts, thread_name_prefix="mirror-put")
            if store.concurrent_puts > 1
            else None
        )
        self._in_flight: dict[str, Future[None]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="checkpoint-mirror", daemon=True)
        self.uploads = 0
        self.deletes = 0
        self.error: BaseException | None = None

    def start(self) -> CheckpointMirror:
        self._thread.start()
        return self

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                self._pass()
                self._stop.wait(self.interval)
        except BaseException as error:  # surfaced by stop()
            self.error = error

    def sync(self) -> None:
        """One pass, its puts done."""
        self._pass()
        self._drain()

    def _pass(self) -> None:
        """New or changed files (commits last), then deletions."""
        found: dict[str, tuple[int, int]] = {}
        for root, _, files in os.walk(self.local):
            for name in files:
                path = Path(root, name)
                relative = path.relative_to(self.local).as_posix()
                if not _uploadable(relative):
                    continue
                try:
                    stat = path.stat()
                except FileNotFoundError:
                    continue
                found[relative] = (stat.st_size, stat.st_mtime_ns)
        with self._lock:
            changed = sorted(
                r for r, sig in found.items() if self._seen.get(r) != sig and r not in self._in_flight
            )
        commits = [r for r in changed if _is_commit(r)]
        for relative in (r for r in changed if not _is_commit(r)):
            if self._puts is None:
                self._upload(relative, found[relative])
            else:
                with self._lock:
                    self._in_flight[relative] = self._puts.submit(self._upload, relative, found[relative])
        if commits:
            self._drain()  # every other file found so far is in the store before a commit
        for relative in commits:
            self._upload(relative, found[relative])
        with self._lock:
            gone = [r for r in self._seen if r not in found]
        for relative in gone:
            self.store.delete(self.bucket, f"{self.prefix}/{relative}")
            with self._lock:
                del self._seen[relative]
            self.deletes += 1

    def _upload(self, relative: str, signature: tuple[int, int]) -> None:
        try:
            try:
                body = (self.local / relative).read_bytes()
            except FileNotFoundError:
                return
            self.store.put(self.bucket, f"{self.prefix}/{relative}", body)
            with self._lock:
                self._seen[relative] = signature
                self.uploads += 1
        finally:
            with self._lock:
                self._in_flight.pop(relative, None)

    def _drain(self) -> None:
        """Wait for every put in flight; raise the first that failed."""
        with self._lock:
            pending = list(self._in_flight.values())
        for put in pending:
            put.result()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)
        if self.error is not None:
            raise self.error
        # The puts still in flight, then a pass that sees them done (a file Spark
        # deleted meanwhile is deleted from the store too).
        for _ in range(2):
            self.sync()
        if self._puts is not None:
            self._puts.shutdown()
