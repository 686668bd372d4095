"""The swap record of an output subject, its states, and who owns each epoch.

``<root>/subjects/<output>/swap`` holds the newest swap of the subject (a swap
replaced by the next plan moves to ``<root>/subjects/<output>/swaps/<id>``)::

    {"id": 3, "subject": out, "input": in, "old": job, "new": job, "epoch": S,
     "state": "planned" | "prepared" | "committed" | "done" | "aborted",
     "planned_at_ms": ms, "deadline_ms": ms, "updated_at_ms": ms,
     "prepared": {"<job>": epoch}, "committed_epoch": e | null, "committed_by": job | null,
     "handover": output epoch | null, "aborted": {"reason", "detail", "by"} | null}

Epochs are subject epochs of the *input* both jobs read aligned: the one epoch
numbering the two jobs share. States::

    planned --(both jobs prepared in epoch S - 2)--> prepared
    prepared --(either job at an epoch after S - 2)--> committed
    committed --(the old job's output of epoch S is registered)--> done
    planned, prepared --(abort, deadline, a job past S - 2 unprepared)--> aborted

Ownership (:func:`owner`) is a pure function of the record. The old job owns
every epoch up to and including ``S``, whatever the state. An epoch after ``S``
is owned by the new job once the swap is committed, by the old job once it is
aborted, and by nobody yet while the swap is planned or prepared: both jobs then
hold that epoch until the swap is decided. Since planned and prepared only ever
become committed or aborted, and those never go back, a definite answer once
given never changes: no epoch is written by both jobs, none by neither.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Literal, cast

from epochstate.core.alignment.errors import CorruptSubjectRecord
from epochstate.core.zookeeper.records import encode

State = Literal["planned", "prepared", "committed", "done", "aborted"]
STATES: tuple[State, ...] = ("planned", "prepared", "committed", "done", "aborted")
UNDECIDED: frozenset[State] = frozenset({"planned", "prepared"})
IN_FLIGHT: frozenset[State] = frozenset({"planned", "prepared", "committed"})

# What a job's sink does with its output of one epoch: register it, leave it out, or wait.
Turn = Literal["write", "skip", "hold"]

# Why a swap was aborted (``Aborted.reason``): the stable reasons of core.reasons where
# one fits, so a planner waiting for the outcome raises the matching error.
BY_REQUEST = "ABORTED_BY_REQUEST"
PREPARE_MISSED = "SWAP_EPOCH_PASSED"
NEW_BEHIND = "NEW_TOO_FAR_BEHIND"
OLD_BEHIND = "OLD_TOO_FAR_BEHIND"

# How many epochs before the swap epoch both jobs prepare.
PREPARE_LEAD = 2


@dataclass(frozen=True)
class Aborted:
    """Why a swap was aborted (one of the reasons above), in words, and by whom."""

    reason: str
    detail: str
    by: str

    def to_json(self) -> dict[str, str]:
        return {"reason": self.reason, "detail": self.detail, "by": self.by}


@dataclass(frozen=True)
class SwapRecord:
    """One hot-swap of output subject ``subject`` from job ``old`` to job ``new`` at input epoch ``epoch``.

    ``id`` counts the swaps of the subject (1 for the first). ``prepared`` maps each
    job that prepared to the epoch it prepared in (always :attr:`prepare_epoch`).
    ``committed_epoch`` is the epoch of ``committed_by`` in which the swap was
    committed. ``handover`` is the output subject epoch the old job registered for
    input epoch ``epoch``, its last: the new job's output of input epoch
    ``epoch + d`` is output epoch ``handover + d`` (:meth:`output_epoch`), so the
    output's epochs stay one unbroken sequence. ``deadline_ms``: a swap still
    undecided then is aborted.
    """

    id: int
    subject: str
    input: str
    old: str
    new: str
    epoch: int
    state: State
    planned_at_ms: int
    deadline_ms: int
    updated_at_ms: int = 0
    prepared: Mapping[str, int] = field(default_factory=dict)
    committed_epoch: int | None = None
    committed_by: str | None = None
    handover: int | None = None
    aborted: Aborted | None = None

    def __post_init__(self) -> None:
        if self.state not in STATES:
            raise ValueError(f"state {self.state!r} is none of {', '.join(STATES)}")
        if self.old == self.new:
            raise ValueError(f"a swap needs two jobs, not {self.old!r} twice")
        if self.epoch < PREPARE_LEAD:
            raise ValueError(f"the swap epoch is at least {PREPARE_LEAD}, not {self.epoch}")
        if (self.state == "aborted") != (self.aborted is not None):
            raise ValueError("an aborted swap, and only one, says why")
        if self.state in ("committed", "done") and self.committed_epoch is None:
            raise ValueError("a committed swap names the epoch it was committed in")
        if (self.state == "done") != (self.handover is not None):
            raise ValueError("a done swap, and only one, names its handover epoch")

    @property
    def prepare_epoch(self) -> int:
        """The input epoch in which both jobs prepare: two before the swap epoch."""
        return self.epoch - PREPARE_LEAD

    @property
    def in_flight(self) -> bool:
        return self.state in IN_FLIGHT

    @property
    def undecided(self) -> bool:
        return self.state in UNDECIDED

    def output_epoch(self, epoch: int) -> int | None:
        """The output subject epoch the new job registers for input epoch ``epoch`` (> the swap epoch)."""
        return None if self.handover is None or epoch <= self.epoch else self.handover + epoch - self.epoch

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "subject": self.subject,
            "input": self.input,
            "old": self.old,
            "new": self.new,
            "epoch": self.epoch,
            "state": self.state,
            "planned_at_ms": self.planned_at_ms,
            "deadline_ms": self.deadline_ms,
            "updated_at_ms": self.updated_at_ms,
            "prepared": dict(sorted(self.prepared.items())),
            "committed_epoch": self.committed_epoch,
            "committed_by": self.committed_by,
            "handover": self.handover,
            "aborted": None if self.aborted is None else self.aborted.to_json(),
        }

    def encode(self) -> bytes:
        return encode(self.to_json())

    @classmethod
    def decode(cls, subject: str, data: bytes | None) -> SwapRecord:
        """The record in a swap znode; CorruptSubjectRecord if it is not one."""
        try:
            value = json.loads(data or b"")
            aborted = value.get("aborted")

            def optional(name: str) -> int | None:
                found = value.get(name)
                return None if found is None else int(found)

            return cls(
                id=int(value["id"]),
                subject=str(value["subject"]),
                input=str(value["input"]),
                old=str(value["old"]),
                new=str(value["new"]),
                epoch=int(value["epoch"]),
                state=cast(State, str(value["state"])),
                planned_at_ms=int(value["planned_at_ms"]),
                deadline_ms=int(value["deadline_ms"]),
                updated_at_ms=int(value.get("updated_at_ms", 0)),
                prepared={str(j): int(e) for j, e in value.get("prepared", {}).items()},
                committed_epoch=optional("committed_epoch"),
                committed_by=None if value.get("committed_by") is None else str(value["committed_by"]),
                handover=optional("handover"),
                aborted=None
                if aborted is None
                else Aborted(str(aborted["reason"]), str(aborted["detail"]), str(aborted["by"])),
            )
        except (KeyError, TypeError, ValueError, AttributeError) as error:
            raise CorruptSubjectRecord(f"the swap of subject {subject!r}: {error!r}") from error

    # Transitions: each returns the record after it; the caller writes it by compare-and-set.

    def with_prepared(self, job: str, now_ms: int) -> SwapRecord:
        prepared = {**self.prepared, job: self.prepare_epoch}
        state: State = "prepared" if {self.old, self.new} <= prepared.keys() else self.state
        return replace(self, prepared=prepared, state=state, updated_at_ms=now_ms)

    def with_committed(self, job: str, epoch: int, now_ms: int) -> SwapRecord:
        return replace(self, state="committed", committed_epoch=epoch, committed_by=job, updated_at_ms=now_ms)

    def with_done(self, handover: int, now_ms: int) -> SwapRecord:
        return replace(self, state="done", handover=handover, updated_at_ms=now_ms)

    def with_aborted(self, reason: str, detail: str, by: str, now_ms: int) -> SwapRecord:
        return replace(self, state="aborted", aborted=Aborted(reason, detail, by), updated_at_ms=now_ms)


def owner(record: SwapRecord, epoch: int) -> str | None:
    """The job whose sink writes the output of input epoch ``epoch``; None: not decided yet.

    The old job up to and including the swap epoch; after it, the new job once the
    swap is committed (or done), the old job once it is aborted, nobody while it is
    planned or prepared. A non-None answer for an epoch never changes.
    """
    if epoch <= record.epoch or record.state == "aborted":
        return record.old
    if record.state in ("committed", "done"):
        return record.new
    return None


def turn(record: SwapRecord, job: str, epoch: int) -> Turn:
    """What ``job``'s sink does with its output of input epoch ``epoch`` ("may I write epoch e?").

    ``write`` for the owner, ``skip`` for any other job, ``hold`` (ask again) while
    the owner is not decided, and for the new job until the swap is done: its
    first epoch follows the old job's last one in the output subject.
    """
    found = owner(record, epoch)
    if found is None:
        return "hold" if job in (record.old, record.new) else "skip"
    if found != job:
        return "skip"
    if job == record.new and record.state != "done":
        return "hold"
    return "write"
