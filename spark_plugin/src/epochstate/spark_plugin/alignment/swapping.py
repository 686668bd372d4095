"""The aligned sink's side of a hot-swap: may batch ``n`` register its output, and as which epoch?

A job's sink asks before each registration. Without a swap on its subject a
sink registers batch ``n`` as subject epoch ``n``, as always, unless it runs in
*shadow* (option ``shadow``): then it registers nothing until a swap names it
as the new job. With a swap, the batch's input epoch (its entry in the job's
mapping of the swap's input subject) is stepped through the protocol
(``epochstate.core.swap.participant``): ``write`` registers (the new job's
output as the epoch after the old job's last one), ``skip`` registers nothing
(the rows the tasks wrote are outside every registered range, never read),
``hold`` waits, since the swap is not decided yet, or the new job waits for
the old job's last epoch. A shadow sink's tasks write no rows at all for a
batch that is sure to be skipped (:meth:`SwapGate.skips`).
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass

from epochstate.core.alignment.subjects import SubjectRegistry
from epochstate.core.swap.participant import SwapParticipant
from epochstate.core.swap.records import SwapRecord, turn
from epochstate.core.swap.registry import SwapRegistry

log = logging.getLogger(__name__)

# How often a held batch asks again; ZooKeeper's watch wakes it sooner on any change.
HOLD_POLL = 0.2


@dataclass(frozen=True)
class Registration:
    """What the sink does with batch ``batch``: register it as ``epoch`` (None: register nothing),
    and, in a swap, report the registration for ``input_epoch``."""

    batch: int
    epoch: int | None
    input_epoch: int | None = None


class SwapGate:
    """The decisions of job ``job``'s sink on subject ``topic``.

    A hold has no stop signal of its own: it runs in the Python worker of the
    driver's commit, and stopping the query interrupts that commit at once, but
    Spark ends the worker, hold and all, only about a minute later. The batch runs
    again when the query starts again.
    """

    def __init__(self, registry: SubjectRegistry, topic: str, job: str, *, shadow: bool = False) -> None:
        self.registry = registry
        self.swaps = SwapRegistry(registry.client, registry.layout.root, timeout=registry.timeout)
        self.topic = topic
        self.job = job
        self.shadow = shadow
        self.participant = SwapParticipant(self.swaps, registry, topic, job)

    def decide(self, batch: int) -> Registration:
        """Where batch ``batch``'s output goes; blocks while the swap says hold."""
        record = self.swaps.get(self.topic)
        if record is None or self.job not in (record.old, record.new):
            return Registration(batch, None if self._bystander(record) else batch)
        source = self.registry.get_source(record.input, self.job)
        input_epoch = None if source is None else source.mapping.get(batch)
        if input_epoch is None:
            # The batch read no epoch of the swap's input aligned: the new job has no
            # epoch to take over; the old job's output is its own as before the swap.
            return Registration(batch, batch if self.job == record.old else None)
        changed = threading.Event()
        while True:
            changed.clear()
            self.swaps.get(self.topic, watch=lambda _: changed.set())
            step = self.participant.step(input_epoch)
            if step is None:
                return Registration(batch, None if self.shadow else batch)
            if step.turn == "skip":
                return Registration(batch, None, input_epoch)
            if step.turn == "write":
                epoch = batch if step.output_epoch is None else step.output_epoch
                return Registration(batch, epoch, input_epoch)
            log.info(
                "batch %d (epoch %d of %r) waits for swap %d of %r (%s)",
                batch,
                input_epoch,
                record.input,
                step.record.id,
                self.topic,
                step.record.state,
            )
            changed.wait(HOLD_POLL)

    def skips(self, batch: int) -> bool:
        """Whether batch ``batch`` of a shadow sink is sure to register nothing: its tasks need not write.

        Only reads (tasks never step the swap). A "skip" never turns into "write":
        before a swap the batch's input epoch is already in the job's mapping, so a
        swap planned later puts its swap epoch at least three epochs after it.
        """
        record = self.swaps.get(self.topic)
        if record is None or self.job not in (record.old, record.new):
            return self._bystander(record)
        source = self.registry.get_source(record.input, self.job)
        input_epoch = None if source is None else source.mapping.get(batch)
        if input_epoch is None:
            return self.job != record.old
        return turn(record, self.job, input_epoch) == "skip"

    def _bystander(self, record: SwapRecord | None) -> bool:
        """Whether this job, not named by the subject's newest swap ``record``, registers nothing.

        A shadow registers nothing until a swap names it, and a job that handed the
        subject over in a done swap never again: its batches would be registered
        after the new writer's epochs, a second copy of their input.
        """
        if self.shadow or record is None:
            return self.shadow
        done = record if record.state == "done" else self.swaps.newest_done(self.topic)
        return done is not None and done.new != self.job

    def registered(self, registration: Registration) -> None:
        """Report a registration made in a swap (the old job's last epoch ends it)."""
        if registration.input_epoch is not None and registration.epoch is not None:
            self.participant.wrote(registration.input_epoch, registration.epoch)
