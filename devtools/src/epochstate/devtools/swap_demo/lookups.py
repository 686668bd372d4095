"""Lookups of the swapped job's state through its alias: OLD's up to the swap epoch, NEW's after it.

A read names an input epoch of ``orders``, which is an epoch of the alias
``order-counts`` (docs/swap.md#aliases): the daemon picks the job that answers
it, reads that job's batch that read the epoch, and says which job it was.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from epochstate.client import EpochStateClient
from epochstate.core.alignment.subjects import SubjectRegistry
from epochstate.devtools.swap_demo.orders import ORDERS

ALIAS = "order-counts"  # the logical name of counts-v1, then counts-v2
LOOKUP_TIMEOUT = 60.0


@dataclass(frozen=True)
class Answer:
    """The state of the users at ``input_epoch``, as job ``job`` held it after its batch ``batch``."""

    input_epoch: int
    job: str
    batch: int | None
    state: Mapping[str, Mapping[str, Any]]


def batch_of(subjects: SubjectRegistry, job: str, input_epoch: int) -> int | None:
    """The batch of ``job`` that read ``input_epoch`` of ``orders`` (None: not read yet)."""
    source = subjects.get_source(ORDERS, job)
    batches = [b for b, e in (source.mapping if source else {}).items() if e == input_epoch]
    return batches[0] if batches else None


def read_state(
    client: EpochStateClient, job: str, epoch: int, users: Sequence[str]
) -> tuple[str, dict[str, dict[str, Any]]]:
    """Job (or alias) ``job``'s state of ``users`` at its epoch ``epoch`` (waits until ingested),
    and the job that answered (for an alias, the one the daemon picked)."""
    found = client.multi_get(job, [[u] for u in users], epoch=epoch, wait=True, timeout=LOOKUP_TIMEOUT)
    answered = next((lk.job for lk in found if lk.job), job)
    # applyInPandasWithState keeps a user's state in the value's "groupState" struct.
    return answered, {
        u: lk.value["groupState"].asdict() for u, lk in zip(users, found, strict=True) if lk.value
    }


def lookup(
    client: EpochStateClient, subjects: SubjectRegistry, input_epoch: int, users: Sequence[str]
) -> Answer:
    """The users' counts at input epoch ``input_epoch``, read through the alias."""
    job, state = read_state(client, ALIAS, input_epoch, users)
    return Answer(input_epoch, job, batch_of(subjects, job, input_epoch), state)
