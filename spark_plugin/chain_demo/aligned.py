"""The demo's third step: job 1's state, pinned to the epoch aligned with a batch of job 2.

Kept in one place so that the read selector "epoch of job A aligned with epoch m
of job B" can replace it: today it resolves the epoch through the subject's
mapping in ZooKeeper and then reads job 1's state at that exact epoch.
"""

from __future__ import annotations

from dataclasses import dataclass

from epochstate.client import EpochStateClient, Lookup
from epochstate.spark_plugin.alignment import SubjectRegistry


@dataclass(frozen=True)
class AlignedState:
    """Comments per issue in job 1's state at ``epoch``, the epoch aligned with job 2's ``batch``."""

    batch: int
    epoch: int
    comments: dict[int, int]


def aligned_epoch(registry: SubjectRegistry, subject: str, reader: str, batch: int) -> int | None:
    """The subject epoch (= the writing job's epoch) that batch ``batch`` of ``reader`` had read up to.

    A batch in which the subject had nothing new (the reader's other source had)
    has no entry of its own; it stands where the newest mapped batch before it
    ended. None when no batch up to ``batch`` read the subject yet.
    """
    source = registry.get_source(subject, reader)
    mapped = [b for b in (source.mapping if source else {}) if b <= batch]
    return source.mapping[max(mapped)] if source and mapped else None


def issue_comments_aligned(
    client: EpochStateClient,
    registry: SubjectRegistry,
    writer: str,
    subject: str,
    reader: str,
    batch: int,
    issues: list[int],
    timeout: float = 60.0,
) -> AlignedState | None:
    """Job ``writer``'s comment counts of ``issues`` at the epoch aligned with ``reader``'s ``batch``.

    Waits (up to ``timeout``) until the daemon has ingested that epoch. None when
    the batch read nothing of the subject yet.

    Raises:
        EpochStateClientError: the daemon could not answer (see epochstate.client.errors).
    """
    epoch = aligned_epoch(registry, subject, reader, batch)
    if epoch is None:
        return None
    found = client.multi_get(writer, [[i] for i in issues], epoch=epoch, wait=True, timeout=timeout)
    return AlignedState(batch, epoch, comments_by_issue(issues, found))


def comments_by_issue(issues: list[int], found: list[Lookup]) -> dict[int, int]:
    """Comment counts out of lookups in job 1's state (applyInPandasWithState: in ``groupState``)."""
    return {
        i: int(lk.value["groupState"]["comments"]) for i, lk in zip(issues, found, strict=True) if lk.value
    }
