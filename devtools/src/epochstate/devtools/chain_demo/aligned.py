"""The demo's third step: job 1's state, pinned to the epoch aligned with a batch of job 2.

The read is pinned with the daemon's ``aligned_with`` selector ("the epoch of job 1
aligned with batch m of job 2"). Job 2 also reads pull-request comments, so some of
its batches read nothing of the subject; such a batch has no aligned epoch of its
own and stands where the newest batch before it that read the subject ended.
"""

from __future__ import annotations

from dataclasses import dataclass

from epochstate.client import AlignedWith, EpochStateClient, Lookup
from epochstate.spark_plugin.alignment import SubjectRegistry


@dataclass(frozen=True)
class AlignedState:
    """Comments per issue in job 1's state at ``epoch``, the epoch aligned with job 2's ``batch``."""

    batch: int
    epoch: int
    comments: dict[int, int]


def subject_batch(registry: SubjectRegistry, subject: str, reader: str, batch: int) -> int | None:
    """The newest batch up to ``batch`` of ``reader`` that read an epoch of ``subject``.

    None when no batch up to ``batch`` read the subject yet.
    """
    source = registry.get_source(subject, reader)
    mapped = [b for b in (source.mapping if source else {}) if b <= batch]
    return max(mapped) if mapped else None


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
    pinned_to = subject_batch(registry, subject, reader, batch)
    if pinned_to is None:
        return None
    aligned = AlignedWith(reader, pinned_to, subject)
    if not issues:
        epoch = client.pinned_epoch(writer, aligned_with=aligned, timeout=timeout)
        return AlignedState(batch, epoch, {})
    found = client.multi_get(writer, [[i] for i in issues], aligned_with=aligned, timeout=timeout)
    return AlignedState(batch, found[0].epoch, comments_by_issue(issues, found))


def comments_by_issue(issues: list[int], found: list[Lookup]) -> dict[int, int]:
    """Comment counts out of lookups in job 1's state (applyInPandasWithState: in ``groupState``)."""
    return {
        i: int(lk.value["groupState"]["comments"]) for i, lk in zip(issues, found, strict=True) if lk.value
    }
