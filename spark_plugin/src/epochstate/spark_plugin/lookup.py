"""Cross-job lookups from inside Spark, pinned to the epoch aligned with the current batch.

Job B reads a subject aligned (``epochstate-kafka`` source); job A wrote that
subject (or reads it aligned too) and is followed by an epochstate daemon. A
lookup from B's batch ``m`` into A's state is pinned to the epoch of A aligned
with ``m`` (the ``aligned_with`` selector): when A wrote what batch ``m`` reads,
that is the state of A right after the epoch that emitted those records. The
pin depends only on ``m``, so a re-run of batch ``m`` (after a failure or a
restart) looks up exactly the same values, however far A has moved on.

In ``foreachBatch``::

    lookup = AlignedLookup("epochstate:7070", job="orders", reader="enrich")

    def process(frame, batch_id):
        users = [[r.user] for r in frame.select("user").distinct().collect()]
        counts = lookup.get(batch_id, users)        # one Lookup per key, in order
        ...

    stream.writeStream.foreachBatch(process).start()

With ``mapInPandas`` the executors do the lookups; pin the epoch on the driver
first, so every task reads the same epoch::

    def process(frame, batch_id):
        epoch = lookup.epoch(batch_id)
        frame.mapInPandas(lookup.with_state(epoch, ["user"]), "user string, count long, found boolean")

On the daemon's node, name its data directory (``data_dir="/var/lib/epochstate"``):
the reads of keys at the pinned epoch are then answered in the reading process from
the daemon's store (``local://``, no network hop, the same answers), wherever that
directory is there to read; elsewhere (an executor on another node) and for pinning
the aligned epoch (which needs the daemon's ZooKeeper) they go to ``target``.

The batch's aligned mapping is recorded when Spark plans the batch's scan of the
subject, before ``foreachBatch`` runs; until then (and while A has not reached
the aligned epoch) a lookup waits, up to ``timeout`` seconds.

Errors are the client's (:mod:`epochstate.client.errors`): ``EpochNotReady``
when the jobs share no subject or one of them reads it unaligned,
``DeadlineExceeded`` after waiting ``timeout`` seconds, ``EpochRetired`` when
the aligned epoch is older than the daemon's retention.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from epochstate.client.client import AlignedWith, EpochStateClient, Lookup
from epochstate.client.local import SCHEME
from epochstate.client.tls import TlsOptions
from epochstate.spark_plugin.zip_imports import steady_zip_imports

# The daemon's limit of keys per MultiGet call.
KEYS_PER_CALL = 10_000
# pandas has no type information here: frames are Any.
Frames = Callable[[Iterator[Any]], Iterator[Any]]

log = logging.getLogger(__name__)


class _LocalReaders:
    """One in-process reader per data directory and process, opened at its first read and
    kept until the process exits: opening one follows the daemon's store (a RocksDB
    secondary), which costs far more than a read, and Spark reuses its Python workers
    for task after task. A directory that cannot be read here is remembered as such
    (None). Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._readers: dict[str, EpochStateClient | None] = {}
        atexit.register(self.close)

    def get(self, data_dir: str, timeout: float) -> EpochStateClient | None:
        with self._lock:
            if data_dir not in self._readers:
                self._readers[data_dir] = _open_local(data_dir, timeout)
            return self._readers[data_dir]

    def close(self) -> None:
        with self._lock:
            readers = [r for r in self._readers.values() if r is not None]
            self._readers.clear()
        for reader in readers:
            reader.close()


def _open_local(data_dir: str, timeout: float) -> EpochStateClient | None:
    if not (Path(data_dir) / "store").is_dir():
        return None
    try:
        return EpochStateClient(f"{SCHEME}{Path(data_dir).absolute()}", timeout=timeout)
    except Exception as error:  # no daemon extra, a store this process may not read: gRPC then
        log.warning("cannot read the daemon's store in %s here (%s): reading over gRPC", data_dir, error)
        return None


_LOCAL = _LocalReaders()


@dataclass(frozen=True)
class AlignedLookup:
    """Lookups into ``job``'s state (one store) from batches of the aligned reader ``reader``.

    ``subject`` names the subject to align through when the jobs share several.
    Holds no connection, so it can be shipped to executors (``mapInPandas``).
    ``tls`` (an identity with the ``read`` role) names files that every executor
    must see at the same paths; None: each process's ``EPOCHSTATE_TLS_*`` variables.
    ``data_dir``: the daemon's data directory; a process that finds its store there
    reads keys at a pinned epoch in-process (``local://``) rather than from ``target``
    (pinning the aligned epoch always asks ``target``). The answers are the same.
    """

    target: str
    job: str
    reader: str
    operator_id: int = 0
    store: str = "default"
    subject: str = ""
    timeout: float = 60.0
    tls: TlsOptions | None = None
    data_dir: str = ""

    def aligned_with(self, batch_id: int) -> AlignedWith:
        return AlignedWith(self.reader, batch_id, self.subject)

    def epoch(self, batch_id: int) -> int:
        """The epoch of ``job`` aligned with batch ``batch_id`` of ``reader`` (waits for it)."""
        with self._client() as client:
            return client.pinned_epoch(
                self.job,
                aligned_with=self.aligned_with(batch_id),
                operator_id=self.operator_id,
                store=self.store,
            )

    def get(self, batch_id: int, keys: Sequence[Any]) -> list[Lookup]:
        """Each key's state at the epoch aligned with batch ``batch_id``, in order of ``keys``."""
        if not keys:
            return []
        local = self._local()
        with self._client() as client:
            epoch = client.pinned_epoch(
                self.job,
                aligned_with=self.aligned_with(batch_id),
                operator_id=self.operator_id,
                store=self.store,
            )
            return self._get_at(client if local is None else local, epoch, keys)

    def get_at(self, epoch: int, keys: Sequence[Any]) -> list[Lookup]:
        """Each key's state at ``epoch`` (from :meth:`epoch`), in order of ``keys``."""
        with self._reader() as client:
            return self._get_at(client, epoch, keys)

    def reads_through(self) -> str:
        """The target this process reads keys at a pinned epoch through: ``local://`` and
        the data directory when its store is readable here, else ``target``."""
        local = self._local()
        return self.target if local is None else local.target

    def with_state(self, epoch: int, key_columns: Sequence[str], *, found_column: str = "found") -> Frames:
        """A ``mapInPandas`` function adding, to each row, its key's state at ``epoch``.

        The key is the row's ``key_columns`` (in key-schema order); each value
        field becomes a column of its name (None when the key has no state), and
        ``found_column`` says whether it had state. A value schema that repeats a
        field name (an aggregation buffer's ``count``, ``sum``, ``count``) cannot be
        columns of a frame: the function raises ``ValueError`` naming the field;
        read such state with :meth:`get_at`, whose values keep every field.
        """
        columns = list(key_columns)

        def add_state(frames: Iterator[Any]) -> Iterator[Any]:
            steady_zip_imports()  # for the next tasks of this Python worker
            with self._reader() as client:
                fields = client.describe(self.job).store(self.operator_id, self.store).value.names
                repeated = sorted({name for name in fields if fields.count(name) > 1})
                if repeated:
                    raise ValueError(
                        f"the value schema of {self.job!r} repeats field name(s) {repeated}: "
                        "one column per name would lose fields; use get_at"
                    )
                for frame in frames:
                    keys = [list(row) for row in frame[columns].itertuples(index=False, name=None)]
                    found = self._get_at(client, epoch, keys)
                    out = frame.copy()
                    for i, name in enumerate(fields):
                        out[name] = [None if r.value is None else r.value[i] for r in found]
                    out[found_column] = [r.found for r in found]
                    yield out

        return add_state

    def _get_at(self, client: EpochStateClient, epoch: int, keys: Sequence[Any]) -> list[Lookup]:
        found: list[Lookup] = []
        for start in range(0, len(keys), KEYS_PER_CALL):
            found += client.multi_get(
                self.job,
                keys[start : start + KEYS_PER_CALL],
                epoch=epoch,
                operator_id=self.operator_id,
                store=self.store,
            )
        return found

    def _client(self) -> EpochStateClient:
        return EpochStateClient(self.target, timeout=self.timeout, tls=self.tls)

    def _local(self) -> EpochStateClient | None:
        """This process's in-process reader of ``data_dir``; None: none here (or no ``data_dir``)."""
        return _LOCAL.get(self.data_dir, self.timeout) if self.data_dir else None

    @contextlib.contextmanager
    def _reader(self) -> Iterator[EpochStateClient]:
        """The client that reads keys here: this process's in-process reader of ``data_dir``
        (kept open), else a new client of ``target`` (closed after)."""
        local = self._local()
        if local is not None:
            yield local
            return
        with self._client() as client:
            yield client
