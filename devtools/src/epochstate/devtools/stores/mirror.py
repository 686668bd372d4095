"""A local Spark checkpoint copied to a checkpoint store as Spark writes it.

The pyspark wheel ships no connector for object stores or HDFS, so Spark writes
locally and the mirror copies each file in Spark's order: within every pass, state
and log files before any new ``commits/<n>`` (Spark commits an epoch only after its
state files are written). Temporary and hidden files are never uploaded (Hadoop's
object store connectors write an object once, at close); files Spark deletes are
deleted. The daemon under test only ever sees the store's URI.
"""

from __future__ import annotations

import os
import threading
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
                self.sync()
                self._stop.wait(self.interval)
        except BaseException as error:  # surfaced by stop()
            self.error = error

    def sync(self) -> None:
        """One pass: new or changed files (commits last), then deletions."""
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
        changed = [r for r, sig in found.items() if self._seen.get(r) != sig]
        for relative in sorted(changed, key=lambda r: (_is_commit(r), r)):
            try:
                body = (self.local / relative).read_bytes()
            except FileNotFoundError:
                continue
            self.store.put(self.bucket, f"{self.prefix}/{relative}", body)
            self._seen[relative] = found[relative]
            self.uploads += 1
        for relative in [r for r in self._seen if r not in found]:
            self.store.delete(self.bucket, f"{self.prefix}/{relative}")
            del self._seen[relative]
            self.deletes += 1

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)
        if self.error is not None:
            raise self.error
        self.sync()
