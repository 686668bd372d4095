"""Two aligned jobs as the swap sees them: each steps the input's epochs and registers its output.

A :class:`Job` is what an aligned sink does in ZooKeeper, with its own session:
for each input epoch it records its batch in its source mapping, steps the swap
(:class:`SwapParticipant`), and on ``write`` registers the output epoch. It can
die anywhere (its session closed or expired by the server) and come back with a
new session, running the epoch it died in again, as Spark re-runs an
uncommitted batch. :class:`Run` drives both jobs in turns and counts every
``write`` answer given to two jobs for one epoch.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from kazoo.client import KazooClient

from epochstate.core.alignment.records import SubjectEpoch
from epochstate.core.alignment.subjects import SubjectRegistry
from epochstate.core.swap.participant import Step, SwapParticipant
from epochstate.core.swap.registry import SwapRegistry

IN, OUT = "orders", "counts"
OLD, NEW, THIRD = "counts-v1", "counts-v2", "counts-v3"
# Batch ids of the jobs differ: each newer job started later.
FIRST_BATCH = {OLD: 0, NEW: 100, THIRD: 200}

# Where a job may die: "step" after stepping an epoch, "registered" after registering its output.
Point = str


@dataclass
class Job:
    """One job at input epoch ``epoch`` (the next it runs), with a session from ``connect``."""

    name: str
    connect: Callable[[], KazooClient]
    epoch: int
    client: KazooClient | None = None
    steps: list[tuple[int, Step]] = field(default_factory=list)  # (input epoch, its answer)

    def start(self) -> None:
        self.client = self.connect()
        self.subjects = SubjectRegistry(self.client)
        self.participant = SwapParticipant(SwapRegistry(self.client), self.subjects, OUT, self.name)

    @property
    def batch(self) -> int:
        return FIRST_BATCH[self.name] + self.epoch

    def run(self, die: Callable[[Job, Point, Step], bool], wrote: dict[int, set[str]]) -> str:
        """Run the current epoch; "died", "hold" or "done" (then it stands at the next epoch)."""
        self.subjects.record_mapping(IN, self.name, "aligned", [(self.batch, self.epoch)], keep=100)
        step = self.participant.step(self.epoch)
        assert step is not None
        self.steps.append((self.epoch, step))
        if die(self, "step", step):
            return "died"
        if step.turn == "hold":
            return "hold"
        if step.turn == "write":
            wrote.setdefault(self.epoch, set()).add(self.name)
            output = self.batch if self.name == OLD else step.output_epoch
            assert output is not None
            register(self.subjects, output, self.name)
            if die(self, "registered", step):
                return "died"
            self.participant.wrote(self.epoch, output)
        self.epoch += 1
        return "done"

    def stop(self) -> None:
        if self.client is not None:
            self.client.stop()
            self.client.close()
            self.client = None


def register(subjects: SubjectRegistry, epoch: int, job: str) -> None:
    subjects.register_epoch(SubjectEpoch(OUT, epoch, (), job, f"query-{job}", 1))


def prepare_subjects(subjects: SubjectRegistry, old_at: int, new_at: int) -> None:
    """Both jobs read ``IN`` aligned up to (not including) their epochs; the old one wrote ``OUT`` so far."""
    for job, at in ((OLD, old_at), (NEW, new_at)):
        entries = [(FIRST_BATCH[job] + e, e) for e in range(at)]
        subjects.register_source(IN, job, "aligned")
        subjects.record_mapping(IN, job, "aligned", entries, keep=100)
    for epoch in range(old_at):
        register(subjects, epoch, OLD)
