"""How long a subject's epochs and its sources' mapping entries live, and the pruner that removes them.

The rule (:func:`plan`): the subject epochs below the *horizon* H are deleted, and
so are the mapping entries that name them. H is the smallest of these holds:

- the floor: the ``keep`` newest registered epochs always stay (``keep >= 2``, so
  the second-to-last epoch that CatchUp compares against is always there);
- a source whose newest batch read aligned, at the subject epoch it read last
  minus one: a restarted query runs its newest batch again (reading that epoch),
  and the next batch reads the epoch after it;
- a source told Align(k) that is not aligned yet, at ``k - 1``: the start of
  epoch k is the end position of epoch ``k - 1``;
- each job touching the subject that a daemon follows (a live replica znode
  under ``<root>/jobs/<job>/replicas``), at the subject epoch aligned with the
  oldest epoch any of its replicas retains: the writer's epoch n is subject
  epoch n, a reader's epoch j is its mapping entry ``j``.

Guarantees: an aligned source never finds an epoch it still needs gone; an
``aligned_with`` read whose answer is an epoch some live daemon still retains
resolves after pruning exactly as before (every subject epoch aligned with a
retained epoch of a followed job is at or above H). Whatever is pruned, a source
record says so in its ``retired`` bounds, which the daemon turns into OUT_OF_RANGE.
What it does not protect: a daemon that is down while the pruner runs has no
replica znode, so it holds nothing back (the floor does).

Who prunes: the aligned sink's driver, after it registers an epoch (every
``keep // 10`` epochs); ``epochstate align prune`` on demand. Pruning twice, or
from two processes at once, ends in the same state.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, replace

from epochstate.core.alignment.errors import InvalidOption
from epochstate.core.alignment.records import SourceRecord
from epochstate.core.alignment.subjects import SubjectRegistry, wall_clock_ms
from epochstate.core.zookeeper.subject_records import RETIRED, Retired

log = logging.getLogger(__name__)

DEFAULT_KEEP = 100
MIN_KEEP = 2


@dataclass(frozen=True)
class Hold:
    """Subject epochs from ``epoch`` on must stay, because of ``reason``."""

    epoch: int
    reason: str


@dataclass(frozen=True)
class RetentionPlan:
    """What retention keeps of a subject: epochs from ``horizon`` on, and why not fewer."""

    topic: str
    horizon: int
    holds: tuple[Hold, ...]

    @property
    def binding(self) -> Hold:
        """The hold that sets the horizon."""
        return min(self.holds, key=lambda hold: hold.epoch)


@dataclass(frozen=True)
class Pruned:
    """What one run of the pruner removed."""

    plan: RetentionPlan
    epochs: tuple[int, ...]
    mapping_entries: Mapping[str, int]  # source -> entries removed from its mapping


def check_keep(keep: int) -> int:
    if keep < MIN_KEEP:
        raise InvalidOption(f"subject retention must keep at least {MIN_KEEP} epochs, not {keep}")
    return keep


def plan(
    topic: str,
    registered: list[int],
    keep: int,
    writer: str | None,
    sources: Mapping[str, SourceRecord],
    retained: Mapping[str, int],
) -> RetentionPlan:
    """The horizon of ``topic`` by the rule above.

    ``registered``: its epochs, ascending; ``writer``: the job that writes it;
    ``sources``: its sources' records by job; ``retained``: per followed job, the
    oldest epoch its live daemon replicas retain (jobs without a replica absent).
    """
    newest = registered[-1] if registered else -1
    holds = [Hold(max(0, newest - check_keep(keep) + 1), f"the {keep} newest epochs are kept")]
    for job, record in sorted(sources.items()):
        holds.extend(_source_holds(job, record))
    if writer is not None and writer in retained:
        holds.append(Hold(retained[writer], f"a daemon retains epochs of writer {writer!r} from there"))
    for job, record in sorted(sources.items()):
        oldest = retained.get(job)
        aligned = sorted(k for j, k in record.mapping.items() if oldest is not None and j >= oldest)
        if aligned:
            holds.append(Hold(aligned[0], f"a daemon retains epochs of reader {job!r} from {oldest}"))
    return RetentionPlan(topic, min(hold.epoch for hold in holds), tuple(holds))


def _source_holds(job: str, record: SourceRecord) -> list[Hold]:
    holds = []
    report, command = record.report, record.live_command
    aligned_now = (
        report is not None
        and report.state == "aligned"
        and report.answers == (None if command is None else command.id)
    )
    if command is not None and command.name == "align" and command.epoch is not None and not aligned_now:
        holds.append(Hold(max(0, command.epoch - 1), f"source {job!r} waits to align at {command.epoch}"))
    if record.mode == "aligned" or (report is not None and report.state == "aligned"):
        read = [max(record.mapping.values())] if record.mapping else []
        if report is not None and report.state == "aligned" and report.subject_epoch is not None:
            read.append(report.subject_epoch)
        if not read:
            holds.append(Hold(0, f"source {job!r} reads aligned from an unknown epoch"))
        else:
            last = min(read)
            holds.append(Hold(max(0, last - 1), f"source {job!r} read epoch {last} last"))
    return holds


class SubjectRetention:
    """Applies the rule to subjects in ``registry``; ``keep`` is the floor.

    Raises RegistryUnavailable when ZooKeeper does not answer (nothing is half
    done that a second run would not finish), CorruptSubjectRecord on a bad znode.
    """

    def __init__(self, registry: SubjectRegistry, keep: int = DEFAULT_KEEP) -> None:
        self.registry = registry
        self.keep = check_keep(keep)

    def plan(self, topic: str) -> RetentionPlan:
        registered = self.registry.epochs(topic)
        lowest = self.registry.get_epoch(topic, registered[0]) if registered else None
        writer = None if lowest is None else lowest.writer
        sources = {
            job: record
            for job in self.registry.sources(topic)
            if (record := self.registry.get_source(topic, job)) is not None
        }
        retained = {
            job: oldest
            for job in sorted({*sources, *([writer] if writer else [])})
            if (oldest := self.registry.oldest_retained(job)) is not None
        }
        return plan(topic, registered, self.keep, writer, sources, retained)

    def prune(self, topic: str) -> Pruned:
        """Delete the epochs below the horizon and the mapping entries naming them."""
        found = self.plan(topic)
        # Mappings first: no read resolves through an entry whose subject epoch is gone.
        trimmed = {
            job: removed
            for job in self.registry.sources(topic)
            if (removed := self._trim(topic, job, found.horizon))
        }
        epochs = tuple(e for e in self.registry.epochs(topic) if e < found.horizon)
        self.registry.delete_epochs(topic, epochs)
        if epochs or trimmed:
            log.info(
                "subject %r: deleted epochs %s, %d mapping entries (kept from %d: %s)",
                topic,
                f"{epochs[0]}..{epochs[-1]}" if epochs else "none",
                sum(trimmed.values()),
                found.horizon,
                found.binding.reason,
            )
        return Pruned(found, epochs, trimmed)

    def _trim(self, topic: str, job: str, horizon: int) -> int:
        """Remove the entries naming subject epochs below ``horizon`` from ``job``'s mapping; how many."""
        removed: list[int] = []

        def trim(record: SourceRecord) -> SourceRecord:
            gone = sorted(j for j, k in record.mapping.items() if k < horizon)
            removed[:] = gone
            if not gone:
                return record
            before = Retired.from_json(record.other.get(RETIRED)) or Retired(0, 0)
            bounds = Retired(max(before.source_epoch, gone[-1] + 1), max(before.subject_epoch, horizon))
            return replace(
                record,
                mapping={j: k for j, k in record.mapping.items() if k >= horizon},
                other={**record.other, RETIRED: bounds.to_json()},
                updated_at_ms=wall_clock_ms(),
            )

        self.registry.update_source(topic, job, trim)
        return len(removed)
