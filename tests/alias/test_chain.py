"""Which job answers which epochs of an alias: a pure function of the alias and the swaps."""

from __future__ import annotations

import pytest

from epochstate.core.alias.chain import Segment, chain_of
from epochstate.core.alias.records import AliasRecord
from epochstate.core.alignment.errors import CorruptSubjectRecord
from epochstate.core.swap.records import State, SwapRecord

ALIAS = AliasRecord("orders", "v1", "out", "in", 7)


def swap(id: int, old: str, new: str, epoch: int, state: State, input: str = "in") -> SwapRecord:
    record = SwapRecord(id, "out", input, old, new, epoch, "planned", 0, 1)
    if state == "aborted":
        return record.with_aborted("ABORTED_BY_REQUEST", "", "test", 2)
    if state in ("committed", "done"):
        record = record.with_committed(new, epoch - 1, 2)
    if state == "done":
        record = record.with_done(epoch + 10, 3)
    return record if state != "prepared" else record.with_prepared(old, 2).with_prepared(new, 2)


def jobs(epochs: range, **swaps: SwapRecord) -> list[str | None]:
    chain = chain_of(ALIAS, swaps.values())
    return [None if (s := chain.answering(e)) is None else s.job for e in epochs]


def test_each_swap_hands_the_epochs_after_its_swap_epoch_over_once_decided() -> None:
    assert jobs(range(3)) == ["v1"] * 3
    for undecided in ("planned", "prepared"):
        assert jobs(range(4, 7), a=swap(1, "v1", "v2", 5, undecided)) == ["v1", "v1", None]
    assert jobs(range(4, 7), a=swap(1, "v1", "v2", 5, "aborted")) == ["v1"] * 3
    committed = jobs(range(4, 7), a=swap(1, "v1", "v2", 5, "committed"))
    assert committed == jobs(range(4, 7), a=swap(1, "v1", "v2", 5, "done")) == ["v1", "v1", "v2"]

    # Swapped on and back, an aborted attempt between; the past swaps in any order.
    chain = chain_of(
        ALIAS,
        [
            swap(4, "v3", "v1", 30, "prepared"),
            swap(1, "v1", "v2", 5, "done"),
            swap(3, "v2", "v3", 20, "done"),
            swap(2, "v2", "v9", 12, "aborted"),
        ],
    )
    assert [(s.job, s.after, s.until, s.swap) for s in chain.segments] == [
        ("v1", None, 5, None),
        ("v2", 5, 20, 1),
        ("v3", 20, None, 3),
    ]
    assert chain.segments[1].took_over == (5, 15) and chain.decided_until == 30
    assert chain.segments[1].input_of_output(17) == 7
    assert [s and s.job for s in map(chain.answering, (5, 6, 20, 21, 30, 31))] == [
        "v1",
        "v2",
        "v2",
        "v3",
        "v3",
        None,
    ]
    assert chain.segment_of("v2") == Segment("v2", 5, 20, 1, (5, 15))

    # An alias defined on a job that took the output over earlier maps its output too.
    later = chain_of(AliasRecord("orders", "v2", "out", "in"), [swap(1, "v1", "v2", 5, "done")])
    assert later.segments == (Segment("v2", took_over=(5, 15)),)
    assert later.answering(0) == later.segments[0]


def test_swaps_of_other_jobs_or_inputs_do_not_move_the_alias() -> None:
    assert jobs(range(6, 7), a=swap(1, "v7", "v2", 5, "done")) == ["v1"]
    assert jobs(range(6, 7), a=swap(1, "v1", "v2", 5, "done", input="other")) == ["v1"]


def test_the_record_round_trips_and_refuses_what_it_cannot_be() -> None:
    assert AliasRecord.decode("orders", ALIAS.encode()) == ALIAS
    with pytest.raises(CorruptSubjectRecord):
        AliasRecord.decode("orders", b'{"name": "orders"}')
    with pytest.raises(ValueError, match="cannot name a job of its own name"):
        AliasRecord("v1", "v1", "out", "in")
