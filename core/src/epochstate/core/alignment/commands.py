"""The alignment protocol's messages (van Kaam §5.6): a coordinator's command, a source's report.

Both live in the source's znode ``<root>/subjects/<topic>/sources/<job>``; the
coordinator writes only ``command``, the source only ``report`` (and its mode and
mapping), each by compare-and-set on the znode's version, so neither overwrites
the other's field.

States of a source::

    unaligned --CatchUp--> catching-up --(passed the second-to-last epoch)--> ready
    ready --Align(k)--> aligning --(its batch ends at the start of epoch k)--> aligned
    any state --Abort--> unaligned

A command carries an id, one more than the previous command's; a report names
the id of the command it answers, so the coordinator can tell "not seen yet"
from "seen and answered". A command names the query it is addressed to (the
source record's ``query_id`` when it was issued): a source of another query
(the reading job's checkpoint was recreated) takes no command addressed to the
old one (``SourceRecord.live_command``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, cast

CommandName = Literal["catch-up", "align", "abort"]
COMMANDS: tuple[CommandName, ...] = ("catch-up", "align", "abort")
State = Literal["unaligned", "catching-up", "ready", "aligning", "aligned"]
STATES: tuple[State, ...] = ("unaligned", "catching-up", "ready", "aligning", "aligned")

# The state in which a source has done what a command asked.
DONE: Mapping[CommandName, State] = {"catch-up": "ready", "align": "aligned", "abort": "unaligned"}


@dataclass(frozen=True)
class Command:
    """A coordinator's command to one source; ``epoch`` is Align's subject epoch ``k``.

    ``query_id`` is the reading query the command is addressed to (None: to whichever
    query reads, as commands issued before the field existed, or to a source record
    without a query id).
    """

    name: CommandName
    id: int
    epoch: int | None = None
    issued_at_ms: int = 0
    query_id: str | None = None

    def __post_init__(self) -> None:
        if self.name not in COMMANDS:
            raise ValueError(f"command {self.name!r} is none of {', '.join(COMMANDS)}")
        if (self.name == "align") != (self.epoch is not None):
            raise ValueError("align, and only align, names a subject epoch")
        if self.epoch is not None and self.epoch < 0:
            raise ValueError(f"a subject epoch is >= 0, not {self.epoch}")

    def to_json(self) -> dict[str, Any]:
        found: dict[str, Any] = {
            "name": self.name,
            "id": self.id,
            "epoch": self.epoch,
            "issued_at_ms": self.issued_at_ms,
        }
        if self.query_id is not None:
            found["query_id"] = self.query_id
        return found

    @classmethod
    def from_json(cls, value: Mapping[str, Any]) -> Command:
        """Raises KeyError, TypeError or ValueError on a malformed command."""
        epoch, query_id = value.get("epoch"), value.get("query_id")
        return cls(
            name=cast(CommandName, str(value["name"])),
            id=int(value["id"]),
            epoch=None if epoch is None else int(epoch),
            issued_at_ms=int(value.get("issued_at_ms", 0)),
            query_id=None if query_id is None else str(query_id),
        )

    def __str__(self) -> str:
        return f"{self.name}({self.epoch})" if self.epoch is not None else self.name


@dataclass(frozen=True)
class Report:
    """Where a source stands after its newest planned batch, and in which state.

    ``position`` is the end (exclusive) of what the source has read, per Kafka
    partition. ``subject_epoch``: aligned, the last subject epoch read; otherwise
    the newest subject epoch the position has passed, when known (None when it
    has passed none). ``answers`` is the id of the command the state answers
    (None before the first command). ``refused`` says why the command was not
    carried out (an Align at an epoch the source had passed already).
    """

    state: State
    position: Mapping[int, int] = field(default_factory=dict)
    subject_epoch: int | None = None
    batch: int | None = None
    answers: int | None = None
    refused: str | None = None

    def __post_init__(self) -> None:
        if self.state not in STATES:
            raise ValueError(f"state {self.state!r} is none of {', '.join(STATES)}")

    def to_json(self) -> dict[str, Any]:
        return {
            "state": self.state,
            "position": {str(p): self.position[p] for p in sorted(self.position)},
            "subject_epoch": self.subject_epoch,
            "batch": self.batch,
            "answers": self.answers,
            "refused": self.refused,
        }

    @classmethod
    def from_json(cls, value: Mapping[str, Any]) -> Report:
        """Raises KeyError, TypeError or ValueError on a malformed report."""

        def optional(name: str) -> int | None:
            found = value.get(name)
            return None if found is None else int(found)

        refused = value.get("refused")
        return cls(
            state=cast(State, str(value["state"])),
            position={int(p): int(o) for p, o in value.get("position", {}).items()},
            subject_epoch=optional("subject_epoch"),
            batch=optional("batch"),
            answers=optional("answers"),
            refused=None if refused is None else str(refused),
        )
