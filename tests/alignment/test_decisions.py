"""The source's protocol decisions (``protocol.decide``) over subject epochs held in memory.

Subject used throughout, two partitions (``end`` = cumulative end position)::

    epoch 0: p0 [0, 4)  p1 [0, 2)     end {0: 4, 1: 2}
    epoch 1: p1 [2, 5)                end {0: 4, 1: 5}
    epoch 2: p0 [6, 8)  (4-6: rows of a failed attempt)   end {0: 8, 1: 5}
"""

from __future__ import annotations

import pytest

from epochstate.core.alignment.boundaries import Boundaries
from epochstate.core.alignment.commands import Command
from epochstate.spark_plugin.alignment import SubjectEpoch, SubjectOffset
from epochstate.spark_plugin.alignment.protocol import decide
from epochstate.spark_plugin.kafka import OffsetRange


class Epochs:
    """Registered epochs of topic ``t`` (a double of the registry's two read calls)."""

    def __init__(self) -> None:
        self.known: dict[int, SubjectEpoch] = {}

    def add(self, k: int, *ranges: tuple[int, int, int]) -> None:
        before = self.known[k - 1].end_position if k - 1 in self.known else {}
        rs = tuple(OffsetRange("t", p, s, e) for p, s, e in ranges)
        self.known[k] = SubjectEpoch("t", k, rs, "up", "q", 0, before)

    def get_epoch(self, topic: str, epoch: int) -> SubjectEpoch | None:
        return self.known.get(epoch)

    def epochs(self, topic: str) -> list[int]:
        return sorted(self.known)


@pytest.fixture
def subject() -> Epochs:
    epochs = Epochs()
    epochs.add(0, (0, 0, 4), (1, 0, 2))
    epochs.add(1, (1, 2, 5))
    epochs.add(2, (0, 6, 8))
    return epochs


def at(*offsets: int, epoch: int | None = None) -> SubjectOffset:
    return SubjectOffset("t", epoch, dict(enumerate(offsets)))


CATCH_UP = Command("catch-up", 1)
ABORT = Command("abort", 3)


def align(k: int) -> Command:
    return Command("align", 2, k)


def test_epoch_starts_and_passing(subject: Epochs) -> None:
    boundaries = Boundaries(subject, "t")
    assert boundaries.start_of(0) == {}
    assert boundaries.start_of(2) == {0: 4, 1: 5}
    assert boundaries.start_of(4) is None, "epoch 3 is not registered"
    assert boundaries.passed({0: 4, 1: 5}, 2) is None
    assert boundaries.passed({0: 6, 1: 5}, 2) is not None, "inside the failed attempt's rows, past 4"
    assert "partition 1" in (boundaries.passed({0: 4, 1: 3}, 1) or "")
    assert boundaries.passed({0: 99, 1: 99}, 4) is None, "unknown until epoch 3 is registered"


def test_the_first_safe_epoch(subject: Epochs) -> None:
    boundaries = Boundaries(subject, "t")
    assert boundaries.first_not_passed({0: 0, 1: 0}) == 0
    assert boundaries.first_not_passed({0: 4, 1: 3}) == 2, "inside epoch 1: the next one"
    assert boundaries.first_not_passed({0: 8, 1: 5}) == 3
    assert boundaries.first_not_passed({0: 9, 1: 5}) == 4, "reading an unregistered epoch: the one after"


def test_ready_once_past_the_second_to_last_epoch(subject: Epochs) -> None:
    boundaries = Boundaries(subject, "t")
    assert decide(at(4, 4), CATCH_UP, boundaries, False).state == "catching-up"
    ready = decide(at(4, 5), CATCH_UP, boundaries, False)
    assert (ready.step, ready.state, ready.subject_epoch) == ("unaligned", "ready", 1)
    assert decide(at(4, 4), CATCH_UP, boundaries, True).state == "ready", "Ready stays"
    assert decide(at(0), CATCH_UP, Boundaries(Epochs(), "t"), False).state == "ready", "nothing to catch up"


def test_align_waits_for_the_epoch_before_then_switches_at_its_end(subject: Epochs) -> None:
    boundaries = Boundaries(subject, "t")
    held = decide(at(8, 5), align(4), boundaries, True)
    assert (held.step, held.state, held.end) == ("hold", "aligning", None)
    subject.add(3, (1, 5, 7))
    switch = decide(at(8, 5), align(4), Boundaries(subject, "t"), True)
    assert (switch.step, switch.state) == ("transition", "aligning")
    assert switch.end == at(8, 7, epoch=3), "up to the start of epoch 4, marked as after epoch 3"
    assert decide(at(8, 7, epoch=3), align(4), boundaries, True).step == "aligned"


def test_align_at_a_passed_epoch_is_refused(subject: Epochs) -> None:
    refused = decide(at(8, 5), align(2), Boundaries(subject, "t"), True)
    assert (refused.step, refused.state) == ("unaligned", "ready")
    assert refused.refused is not None and "subject epoch 2" in refused.refused


def test_abort_and_no_command(subject: Epochs) -> None:
    boundaries = Boundaries(subject, "t")
    assert decide(at(4, 2, epoch=0), ABORT, boundaries, False).step == "unaligned"
    assert decide(at(4, 2, epoch=0), None, boundaries, False).step == "aligned"
    assert decide(at(4, 2), None, boundaries, False).step == "unaligned"
    catching = decide(at(4, 2, epoch=0), CATCH_UP, boundaries, False)
    assert catching.step == "unaligned", "catch-up reads unaligned, also after reading aligned"
