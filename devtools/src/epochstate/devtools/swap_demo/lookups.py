"""Lookups of the swapped job's state: OLD's up to the swap epoch, NEW's after it.

A read names an input epoch of ``orders``; each job's batch that read that
epoch comes from the job's mapping (the aligned source records it). The job
that serves an epoch is :func:`serving_job`: the one place to change once the
daemon serves a logical name for the pair.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from epochstate.client import EpochStateClient
from epochstate.core.alignment.subjects import SubjectRegistry
from epochstate.core.swap.records import SwapRecord
from epochstate.devtools.swap_demo.orders import ORDERS

LOOKUP_TIMEOUT = 60.0


@dataclass(frozen=True)
class Answer:
    """The state of the users at ``input_epoch``, as job ``job`` held it after its batch ``batch``."""

    input_epoch: int
    job: str
    batch: int
    state: Mapping[str, Mapping[str, Any]]


def serving_job(swap: SwapRecord, input_epoch: int) -> str:
    """The job whose state answers for ``input_epoch``: OLD's up to the swap epoch, NEW's after it."""
    return swap.old if input_epoch <= swap.epoch else swap.new


def batch_of(subjects: SubjectRegistry, job: str, input_epoch: int) -> int | None:
    """The batch of ``job`` that read ``input_epoch`` of ``orders`` (None: not read yet)."""
    source = subjects.get_source(ORDERS, job)
    batches = [b for b, e in (source.mapping if source else {}).items() if e == input_epoch]
    return batches[0] if batches else None


def read_state(
    client: EpochStateClient, job: str, batch: int, users: Sequence[str]
) -> dict[str, dict[str, Any]]:
    """Job ``job``'s state of ``users`` after batch ``batch`` (waits for the daemon to ingest it)."""
    found = client.multi_get(job, [[u] for u in users], epoch=batch, wait=True, timeout=LOOKUP_TIMEOUT)
    # applyInPandasWithState keeps a user's state in the value's "groupState" struct.
    return {u: lk.value["groupState"].asdict() for u, lk in zip(users, found, strict=True) if lk.value}


def lookup(
    client: EpochStateClient,
    subjects: SubjectRegistry,
    swap: SwapRecord,
    input_epoch: int,
    users: Sequence[str],
) -> Answer | None:
    """The users' counts at ``input_epoch`` through the swap (None: the serving job has not read it)."""
    job = serving_job(swap, input_epoch)
    batch = batch_of(subjects, job, input_epoch)
    if batch is None:
        return None
    return Answer(input_epoch, job, batch, read_state(client, job, batch, users))
