"""What the swap demo prints at the end: the output's epochs, the counter check, the swap epoch,
lookups on both sides of it and the shadow comparison; and the one line of a lookup."""

from __future__ import annotations

from typing import Any

from rich.console import Console

from epochstate.client import EpochStateClient
from epochstate.core.alignment.subjects import SubjectRegistry
from epochstate.core.swap.records import SwapRecord
from epochstate.devtools.swap_demo.checks import compare_shadow, counter_check
from epochstate.devtools.swap_demo.jobs import COUNTS, NEW, OLD
from epochstate.devtools.swap_demo.lookups import ALIAS, Answer, lookup, read_state
from epochstate.devtools.swap_demo.orders import ORDERS, USERS

console = Console(highlight=False, soft_wrap=True)
OK, FAILED = "[green]✓[/green]", "[red]✗[/red]"


def counts_line(answer: Answer) -> str:
    """One line of an answer: which job and batch, and each user's count (and amount, in v2)."""
    users = ", ".join(
        f"{u} {s['count']}" + (f" (amount {s['amount']})" if "amount" in s else "")
        for u, s in sorted(answer.state.items())
    )
    return f"{ALIAS} at input epoch {answer.input_epoch} <- {answer.job} batch {answer.batch}: {users}"


def report(
    rows: list[dict[str, Any]],
    failure: str | None,
    swap: SwapRecord | None,
    subjects: SubjectRegistry,
    client: EpochStateClient,
    written: dict[str, int],
) -> int:
    if failure is not None:
        console.print(f"{FAILED} {failure}")
    if swap is None or swap.state != "done" or swap.handover is None:
        return 1
    registered = [subjects.get_epoch(COUNTS, e) for e in subjects.epochs(COUNTS)]
    epochs = [e.epoch for e in registered if e is not None]
    writers = [e.writer for e in registered if e is not None]
    unbroken = epochs == list(range(epochs[0], epochs[0] + len(epochs))) if epochs else False
    first_new = writers.index(NEW) if NEW in writers else len(writers)
    clean = unbroken and set(writers[:first_new]) <= {OLD} and set(writers[first_new:]) <= {NEW}
    console.print(
        f"{OK if clean else FAILED} subject {COUNTS!r}: epochs {epochs[0]}..{epochs[-1]}"
        f"{' unbroken' if unbroken else ' WITH GAPS'}: up to {swap.handover} by {OLD}, "
        f"{swap.handover + 1}..{epochs[-1]} by {NEW}"
    )
    check = counter_check(written, rows)
    console.print(
        f"{OK if check.exact else FAILED} counter check: {check.written} orders in, {check.counted} counted "
        f"downstream: {check.lost} lost, {check.doubled} doubled"
        + (f"; running counts jump for {', '.join(check.gaps)}" if check.gaps else "")
    )
    console.print(
        f"{OK} swap epoch: input epoch {swap.epoch} of {ORDERS!r} is v1's last (its output epoch "
        f"{swap.handover}); v2 answers from input epoch {swap.epoch + 1} (output epoch {swap.handover + 1})"
    )
    answered = True  # by the job the swap says: OLD up to the swap epoch, NEW after it
    for epoch in (swap.epoch, swap.epoch + 1):
        answer = lookup(client, subjects, epoch, USERS)
        side, expected = ("before", OLD) if epoch <= swap.epoch else ("after ", NEW)
        answered = answered and answer.job == expected
        mark = "" if answer.job == expected else f" {FAILED} (expected {expected})"
        console.print(f"  lookup {side} the swap: {counts_line(answer)}{mark}")
    shadow = compare_shadow(
        lambda job, batch, keys: read_state(client, job, batch, keys)[1],
        (OLD, mapping(subjects, OLD)),
        (NEW, mapping(subjects, NEW)),
        USERS,
        range(max(0, swap.epoch - 4), swap.epoch + 1),
    )
    span = f"{shadow.epochs[0]}..{shadow.epochs[-1]}" if shadow.epochs else "none"
    console.print(
        f"{OK if shadow.same else FAILED} shadow comparison: {NEW}'s state against {OLD}'s "
        f"({', '.join(shadow.fields) or 'no shared field'}) at input epochs {span}: "
        f"{len(shadow.differences)} difference(s)"
    )
    return 0 if clean and check.exact and answered and shadow.same and failure is None else 1


def mapping(subjects: SubjectRegistry, job: str) -> dict[int, int]:
    source = subjects.get_source(ORDERS, job)
    return dict(source.mapping) if source else {}
