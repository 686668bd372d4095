"""The swap znodes of output subjects: read, create, and change by compare-and-set.

One znode per output subject holds its newest swap (``records``). Every change
is a compare-and-set on the znode's version, repeated on the newest record when
another writer came first, so the coordinator and both jobs may act at once and
exactly one of two conflicting transitions (commit or abort) wins. A new plan
that replaces a finished swap moves it to ``swaps/<id>`` in the same ZooKeeper
transaction, and drops the past swaps beyond :data:`SWAP_HISTORY` there too.
Bounded requests, RegistryUnavailable and AccessDenied as in
:class:`~epochstate.core.alignment.requests.SubjectRequests`.
"""

from __future__ import annotations

from collections.abc import Callable

from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

from epochstate.core.alignment.layout import DEFAULT_ROOT, check_topic
from epochstate.core.alignment.requests import SubjectRequests, Watch
from epochstate.core.swap.errors import SwapInFlight, SwapNotFound
from epochstate.core.swap.records import SwapRecord
from epochstate.core.zookeeper.layout import Layout

# How many finished swaps of a subject stay in ``swaps/``, besides the newest done one.
# Every znode here has a bounded lifetime: a subject swapped back and forth for years
# must not grow its history without end. The newest done swap is kept whatever its
# age, since a job that took the subject over numbers its output from that swap's
# handover (``participant``); the others are only read by people (``swap status``).
SWAP_HISTORY = 20

# A change: the record to write instead of ``current`` (``current`` itself: write nothing).
Change = Callable[[SwapRecord], SwapRecord]


class SwapRegistry(SubjectRequests):
    """The swaps of the subjects under ``root``; safe to share between threads."""

    def __init__(self, client: KazooClient, root: str = DEFAULT_ROOT, *, timeout: float = 5.0) -> None:
        super().__init__(client, timeout)
        self.layout = Layout(root)

    def get(self, subject: str, watch: Watch | None = None) -> SwapRecord | None:
        """The newest swap of output subject ``subject``; None if none was ever planned.

        With ``watch``, ZooKeeper calls it once when the record changes (or appears);
        it runs on kazoo's event thread and must not block.
        """
        path = self.layout.subject_swap(check_topic(subject))
        data = self._call(lambda: self._read(path, watch))
        return None if data is None else SwapRecord.decode(subject, data)

    def past(self, subject: str) -> list[SwapRecord]:
        """The finished swaps the newer ones replaced, oldest first."""
        check_topic(subject)
        return self._call(lambda: self._past(subject))

    def newest_done(self, subject: str) -> SwapRecord | None:
        """The newest finished swap of ``subject`` that is done (not aborted); None if there is none.

        Past swaps are read newest first until a done one: usually only the newest.
        """
        folder = self.layout.subject_swaps(check_topic(subject))

        def read() -> SwapRecord | None:
            for name in sorted(self._children(folder), reverse=True):
                data = self._read(f"{folder}/{name}", None)
                if data is not None and (record := SwapRecord.decode(subject, data)).state == "done":
                    return record
            return None

        return self._call(read)

    def _past(self, subject: str) -> list[SwapRecord]:
        folder = self.layout.subject_swaps(subject)
        found = []
        for name in sorted(self._children(folder)):
            data = self._read(f"{folder}/{name}", None)
            if data is not None:
                found.append(SwapRecord.decode(subject, data))
        return found

    def create(self, subject: str, plan: Callable[[SwapRecord | None], SwapRecord]) -> SwapRecord:
        """Write the swap ``plan`` returns for the newest one (None: no swap yet) as the newest.

        ``plan`` may run several times, each time on the newest record, and raises
        to refuse. Refused with SwapInFlight while the newest swap is in flight.
        """
        path = self.layout.subject_swap(check_topic(subject))
        self._ensure(self.layout.subject_swaps(subject))

        def attempt() -> SwapRecord:
            while True:  # compare-and-set: again on the newest record when another writer came first
                try:
                    data, stat = self._wait(self.client.get_async(path))
                    current: SwapRecord | None = SwapRecord.decode(subject, data)
                except NoNodeError:
                    current, stat = None, None
                if current is not None and current.in_flight:
                    raise SwapInFlight(
                        f"swap {current.id} of subject {subject!r} ({current.old!r} -> {current.new!r} "
                        f"at epoch {current.epoch}) is {current.state}: one swap in flight per subject",
                        metadata={"swapId": str(current.id), "state": current.state},
                    )
                record = plan(current)
                try:
                    if current is None or stat is None:
                        self._wait(self.client.create_async(path, record.encode()))
                    else:
                        self._replace(subject, current, record, stat.version)
                except (NodeExistsError, BadVersionError, NoNodeError):
                    continue
                return record

        return self._call(attempt)

    def _replace(self, subject: str, current: SwapRecord, record: SwapRecord, version: int) -> None:
        """Move ``current`` to the past swaps and write ``record`` in its place, in one transaction."""
        transaction = self.client.transaction()
        transaction.create(self.layout.subject_past_swap(subject, current.id), current.encode())
        for dropped in self._beyond_history(subject, current):
            transaction.delete(self.layout.subject_past_swap(subject, dropped))
        transaction.set_data(self.layout.subject_swap(subject), record.encode(), version)
        failed = [r for r in self._wait(transaction.commit_async()) if isinstance(r, Exception)]
        if failed:
            raise failed[0]

    def _beyond_history(self, subject: str, joining: SwapRecord) -> list[int]:
        """The ids of the past swaps to drop when ``joining`` joins them: all but the newest
        :data:`SWAP_HISTORY`, and never the newest done one."""
        kept = [*self._past(subject), joining]
        done = [p.id for p in kept if p.state == "done"]
        keep = {p.id for p in kept[-SWAP_HISTORY:]} | set(done[-1:])
        return [p.id for p in kept if p.id not in keep]

    def update(self, subject: str, change: Change) -> SwapRecord:
        """Apply ``change`` to the newest swap of ``subject`` by compare-and-set; the record after it.

        ``change`` may run several times (each time on the newest record) and may
        raise to refuse. SwapNotFound when the subject has no swap.
        """
        path = self.layout.subject_swap(check_topic(subject))

        def attempt() -> SwapRecord:
            while True:  # compare-and-set: again on the newest record when another writer came first
                try:
                    data, stat = self._wait(self.client.get_async(path))
                except NoNodeError:
                    raise SwapNotFound(f"subject {subject!r} has no swap") from None
                current = SwapRecord.decode(subject, data)
                record = change(current)
                if record == current:
                    return current
                try:
                    self._wait(self.client.set_async(path, record.encode(), stat.version))
                except BadVersionError:
                    continue
                return record

        return self._call(attempt)
