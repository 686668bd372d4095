"""The swap demo's checks, in-process: the counter check and the shadow comparison."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from epochstate.devtools.swap_demo.checks import compare_shadow, counter_check

WRITTEN = {"alice": 3, "bob": 2}


def rows(*epochs: dict[str, tuple[int, int]]) -> list[dict[str, Any]]:
    """The output subject's rows, epoch by epoch: user -> (orders in the epoch, running count)."""
    return [{"user": u, "orders": o, "count": c} for epoch in epochs for u, (o, c) in epoch.items()]


def test_every_order_counted_once_is_exact() -> None:
    check = counter_check(WRITTEN, rows({"alice": (2, 2), "bob": (1, 1)}, {"alice": (1, 3), "bob": (1, 2)}))
    assert (check.written, check.counted, check.lost, check.doubled, check.gaps) == (5, 5, 0, 0, ())
    assert check.exact


def test_an_epoch_registered_by_both_jobs_is_doubled_and_one_by_neither_lost() -> None:
    first, second = {"alice": (2, 2), "bob": (1, 1)}, {"alice": (1, 3), "bob": (1, 2)}
    doubled = counter_check(WRITTEN, rows(first, first, second))
    assert (doubled.lost, doubled.doubled, doubled.gaps) == (0, 3, ("alice", "bob"))
    lost = counter_check(WRITTEN, rows(second))
    assert (lost.lost, lost.doubled, lost.gaps) == (3, 0, ("alice", "bob"))
    assert not doubled.exact and not lost.exact


def test_nothing_written_is_not_exact() -> None:
    assert not counter_check({}, []).exact


class States:
    """Each job's state per batch: batch -> user -> fields."""

    def __init__(self, states: Mapping[str, Mapping[int, Mapping[str, Mapping[str, Any]]]]) -> None:
        self.states = states
        self.reads: list[tuple[str, int]] = []

    def __call__(self, job: str, batch: int, keys: Sequence[str]) -> Mapping[str, Mapping[str, Any]]:
        self.reads.append((job, batch))
        return {k: v for k, v in self.states[job][batch].items() if k in keys}


def test_the_shadow_comparison_reads_both_jobs_at_the_batches_of_one_input_epoch() -> None:
    # v2 started later: its batch 10 read input epoch 0; v1's batch 0 did.
    states = States(
        {
            "v1": {0: {"alice": {"count": 1}}, 1: {"alice": {"count": 2}, "bob": {"count": 1}}},
            "v2": {
                10: {"alice": {"count": 1, "amount": 5}},
                11: {"alice": {"count": 2, "amount": 9}, "bob": {"count": 1, "amount": 3}},
            },
        }
    )
    found = compare_shadow(states, ("v1", {0: 0, 1: 1}), ("v2", {10: 0, 11: 1}), ["alice", "bob"], range(3))
    assert found.same and found.epochs == (0, 1) and found.fields == ("count",)
    assert states.reads == [("v1", 0), ("v2", 10), ("v1", 1), ("v2", 11)]


def test_the_shadow_comparison_names_each_key_that_differs() -> None:
    states = States(
        {
            "v1": {0: {"alice": {"count": 2}, "bob": {"count": 1}}},
            "v2": {0: {"alice": {"count": 3, "amount": 5}}},
        }
    )
    found = compare_shadow(states, ("v1", {0: 0}), ("v2", {0: 0}), ["alice", "bob", "carol"], [0])
    assert not found.same
    assert [(d.input_epoch, d.key, d.new) for d in found.differences] == [
        (0, "alice", {"count": 3, "amount": 5}),
        (0, "bob", None),
    ]
