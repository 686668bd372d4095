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

The batch's aligned mapping is recorded when Spark plans the batch's scan of the
subject, before ``foreachBatch`` runs; until then (and while A has not reached
the aligned epoch) a lookup waits, up to ``timeout`` seconds.

Errors are the client's (:mod:`epochstate.client.errors`): ``EpochNotReady``
when the jobs share no subject or one of them reads it unaligned,
``DeadlineExceeded`` after waiting ``timeout`` seconds, ``EpochRetired`` when
the aligned epoch is older than the daemon's retention.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from epochstate.client.client import AlignedWith, EpochStateClient, Lookup
from epochstate.client.tls import TlsOptions
from epochstate.spark_plugin.zip_imports import steady_zip_imports

# The daemon's limit of keys per MultiGet call.
KEYS_PER_CALL = 10_000
# pandas has no type information here: frames are Any.
Frames = Callable[[Iterator[Any]], Iterator[Any]]


@dataclass(frozen=True)
class AlignedLookup:
    """Lookups into ``job``'s state (one store) from batches of the aligned reader ``reader``.

    ``subject`` names the subject to align through when the jobs share several.
    Holds no connection, so it can be shipped to executors (``mapInPandas``).
    ``tls`` (an identity with the ``read`` role) names files that every executor
    must see at the same paths; None: each process's ``EPOCHSTATE_TLS_*`` variables.
    """

    target: str
    job: str
    reader: str
    operator_id: int = 0
    store: str = "default"
    subject: str = ""
    timeout: float = 60.0
    tls: TlsOptions | None = None

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
        with self._client() as client:
            epoch = client.pinned_epoch(
                self.job,
                aligned_with=self.aligned_with(batch_id),
                operator_id=self.operator_id,
                store=self.store,
            )
            return self._get_at(client, epoch, keys)

    def get_at(self, epoch: int, keys: Sequence[Any]) -> list[Lookup]:
        """Each key's state at ``epoch`` (from :meth:`epoch`), in order of ``keys``."""
        with self._client() as client:
            return self._get_at(client, epoch, keys)

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
            with self._client() as client:
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
