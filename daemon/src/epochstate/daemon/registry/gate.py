"""Which of this node's replica znodes may be announced: the gate of group mode.

In a group (docs/groups.md) a newly assigned replica ingests silently until it
has caught up with the job's committed epochs; only then may its replica znode
``<root>/jobs/<job>/replicas/<node>`` exist, since routing trusts that znode.
The gate holds such a job's replica back (the epoch znodes, facts shared by
every replica, are still written) and notes replica znodes to delete: a held
replica that was announced before (a restart) and a job no longer followed.
Jobs never held (standalone jobs) are announced as soon as they hold an epoch.
Thread-safe.
"""

from __future__ import annotations

import threading


class ReplicaGate:
    """The jobs whose replica znode is held back, and the replica znodes to delete."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._held: set[str] = set()
        self._withdrawn: set[str] = set()

    def hold(self, job: str) -> None:
        """Do not announce ``job``'s replica (and delete its znode) until :meth:`release`."""
        with self._lock:
            self._held.add(job)
            self._withdrawn.add(job)

    def release(self, job: str) -> None:
        """Announce ``job``'s replica again (it caught up)."""
        with self._lock:
            self._held.discard(job)
            self._withdrawn.discard(job)

    def forget(self, job: str) -> None:
        """``job`` is no longer followed: delete its replica znode, hold nothing of it."""
        with self._lock:
            self._held.discard(job)
            self._withdrawn.add(job)

    def announced(self, job: str) -> bool:
        """Whether ``job``'s replica znode may be written."""
        with self._lock:
            return job not in self._held

    def withdrawn(self) -> set[str]:
        """The jobs whose replica znode is to be deleted (now)."""
        with self._lock:
            return set(self._withdrawn)

    def deleted(self, job: str) -> None:
        """Note that ``job``'s replica znode was deleted (a forgotten job is then done with)."""
        with self._lock:
            if job not in self._held:
                self._withdrawn.discard(job)
