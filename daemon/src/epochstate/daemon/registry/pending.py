"""Epoch records accepted by the registry but not yet written to ZooKeeper."""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

from epochstate.core.zookeeper.errors import EpochConflict
from epochstate.core.zookeeper.records import ReplicaState, same_record


@dataclass(eq=False)
class PendingEpoch:
    """One epoch to register, with the replica state the node had when publishing it."""

    job: str
    epoch: int
    data: bytes
    replica: ReplicaState
    # Set when ZooKeeper already holds a different record for this epoch.
    conflict: EpochConflict | None = None


class PendingEpochs:
    """A FIFO of epoch records, at most one per (job, epoch).

    Records leave in the order they were published, so ZooKeeper never shows a
    later epoch of a job without the earlier ones. Not thread-safe: the owner
    guards it with its own lock.
    """

    def __init__(self) -> None:
        self._entries: OrderedDict[tuple[str, int], PendingEpoch] = OrderedDict()

    def __len__(self) -> int:
        return len(self._entries)

    def add(self, entry: PendingEpoch) -> PendingEpoch:
        """Queue ``entry``; if the same record is queued already, that one is returned.

        Raises:
            EpochConflict: a different record for the same epoch is queued.
        """
        key = (entry.job, entry.epoch)
        queued = self._entries.get(key)
        if queued is None:
            self._entries[key] = entry
            return entry
        if not same_record(queued.data, entry.data):
            raise EpochConflict(
                f"epoch {entry.epoch} of job {entry.job!r} is already queued with another record"
            )
        return queued

    def head(self) -> PendingEpoch | None:
        return next(iter(self._entries.values()), None)

    def remove(self, entry: PendingEpoch) -> None:
        key = (entry.job, entry.epoch)
        if self._entries.get(key) is entry:
            del self._entries[key]

    def drop_job(self, job: str) -> int:
        """Forget every queued epoch of ``job`` (a query replaced by another); how many."""
        return self.drop_before(job, 2**63)

    def drop_before(self, job: str, oldest_epoch: int) -> int:
        """Forget queued epochs of ``job`` older than ``oldest_epoch``; how many."""
        old = [key for key in self._entries if key[0] == job and key[1] < oldest_epoch]
        for key in old:
            del self._entries[key]
        return len(old)
