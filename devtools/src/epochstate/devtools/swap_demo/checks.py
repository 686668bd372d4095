"""What the swap demo checks: every order counted once downstream, and NEW's state equal to OLD's.

The counter check (Wiemers' exactly-once check, per user): the orders the
producer wrote against the ``orders`` column of every row the downstream job
read from the swapped subject. An input epoch whose output both jobs
registered counts its orders twice; one that neither registered counts none.
The running ``count`` of each user must also go on without a gap from row to
row, across the handover.

The shadow comparison is the check a user runs before a swap: NEW's state
against OLD's, epoch by epoch, at the batches of both that read the same
input epoch (aligned jobs' state after one input epoch is comparable, since
both have read exactly the same orders). The fields both states have must
agree; a field only NEW has (a new column) is not compared.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol


@dataclass(frozen=True)
class CounterCheck:
    """``written`` orders in, ``counted`` counted downstream; ``gaps``: users whose running count jumps."""

    written: int
    counted: int
    lost: int
    doubled: int
    gaps: tuple[str, ...] = ()

    @property
    def exact(self) -> bool:
        return self.lost == 0 and self.doubled == 0 and not self.gaps and self.written > 0


def counter_check(written: Mapping[str, int], rows: Iterable[Mapping[str, Any]]) -> CounterCheck:
    """Check the rows of the output subject, in subject-epoch order, against the orders written per user.

    Each row is ``{"user", "orders", "count"}``: the user's orders in that epoch
    and the running count after it.
    """
    counted: Counter[str] = Counter()
    gaps: set[str] = set()
    for row in rows:
        user, orders = str(row["user"]), int(row["orders"])
        if counted[user] + orders != int(row["count"]):
            gaps.add(user)
        counted[user] += orders
    users = set(written) | set(counted)
    return CounterCheck(
        written=sum(written.values()),
        counted=sum(counted.values()),
        lost=sum(max(0, written.get(u, 0) - counted[u]) for u in users),
        doubled=sum(max(0, counted[u] - written.get(u, 0)) for u in users),
        gaps=tuple(sorted(gaps)),
    )


class StateReader(Protocol):
    """A job's state of ``keys`` after its batch ``batch``: key -> the state's fields (absent: no state)."""

    def __call__(self, job: str, batch: int, keys: Sequence[str]) -> Mapping[str, Mapping[str, Any]]: ...


@dataclass(frozen=True)
class Difference:
    input_epoch: int
    key: str
    old: Mapping[str, Any] | None
    new: Mapping[str, Any] | None


@dataclass(frozen=True)
class ShadowComparison:
    """The input epochs compared, the fields compared, and every key whose shared fields differ."""

    epochs: tuple[int, ...]
    fields: tuple[str, ...]
    differences: tuple[Difference, ...] = field(default=())

    @property
    def same(self) -> bool:
        return bool(self.epochs) and not self.differences


def compare_shadow(
    read: StateReader,
    old: tuple[str, Mapping[int, int]],
    new: tuple[str, Mapping[int, int]],
    keys: Sequence[str],
    epochs: Iterable[int],
) -> ShadowComparison:
    """Compare NEW's state with OLD's at each input epoch of ``epochs`` that both jobs have read.

    ``old`` and ``new`` are (job, its mapping batch -> input epoch), as the
    aligned source records it. A key with state in one job only is a
    difference; so is a field both states have with two values.
    """
    (old_job, old_mapping), (new_job, new_mapping) = old, new
    old_batch = {e: b for b, e in old_mapping.items()}
    new_batch = {e: b for b, e in new_mapping.items()}
    compared: list[int] = []
    fields: set[str] = set()
    differences: list[Difference] = []
    for epoch in sorted(set(epochs)):
        if epoch not in old_batch or epoch not in new_batch:
            continue
        compared.append(epoch)
        before = read(old_job, old_batch[epoch], keys)
        after = read(new_job, new_batch[epoch], keys)
        for key in keys:
            a, b = before.get(key), after.get(key)
            shared = set(a) & set(b) if a is not None and b is not None else set()
            fields |= shared
            if (a is None) != (b is None) or any(a[f] != b[f] for f in shared if a and b):
                differences.append(Difference(epoch, key, a, b))
    return ShadowComparison(tuple(compared), tuple(sorted(fields)), tuple(differences))
