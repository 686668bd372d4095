"""Exactly once across hot-swaps: real Spark jobs SIGKILLed at every step of the protocol.

An upstream job (the test's SparkSession) writes uniquely numbered records to
the input subject ``IN`` through the aligned sink. Relay jobs read ``IN``
aligned and write one JSON record per id to the output subject ``OUT`` through
the aligned sink, each in a process of its own (``tests.alignment.jobs relay``):
``v1`` first, then ``v2`` (shadow) takes ``OUT`` over computing the same, then
``v3`` (shadow) takes it over from ``v2`` computing a new column. A downstream
job (the test's SparkSession) reads ``OUT`` aligned throughout and counts ids.

In each swap, one job is SIGKILLed in its batch of each input epoch around the
swap epoch ``S`` while the other is paused (SIGSTOP), so that the victim dies
in a known state of the swap: in ``S - 2`` (planned: both prepare there), in
``S - 1`` (prepared: the first step in it commits), in ``S`` (committed: the old
job's last epoch) and in ``S + 1`` (the new job's first). CI kills the old job
in the first two of one swap and the new job in the other two, the other way
round in the next swap, so every (old/new job, step) pair dies once in two
swaps. The process that takes a victim's place boots ahead (``JobProcess.prewarm``),
so that a death costs the query's restart from its checkpoint, not a JVM's boot.

Afterwards: both swaps are done; ``OUT``'s epochs are one unbroken sequence, each
written by its owner; every input id is in exactly one ``OUT`` epoch, computed
as its writer's version computes it (v2's epochs equal what v1 computes for
them, v3's have the new column), in the order of the input's epochs; the
downstream job read every epoch of ``OUT`` once, one batch per epoch, and its
state counts each id once.
"""

from __future__ import annotations

import json
import time
import uuid
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from kazoo.client import KazooClient

from epochstate.core.alignment.subjects import SubjectRegistry
from epochstate.core.swap.coordinator import SwapCoordinator
from epochstate.core.swap.records import SwapRecord
from epochstate.core.swap.registry import SwapRegistry
from epochstate.daemon.sources.checkpoint.checkpoint import Checkpoint
from epochstate.spark_plugin.alignment import register
from epochstate.spark_plugin.alignment.connections import close_shared_clients
from epochstate.spark_plugin.alignment.planned import PlannedOffsets
from tests.alignment.conftest import LAUNCH_FAILURE, read_epoch
from tests.alignment.jobs import ID_OF_OUTPUT, JobProcess, Wiring, start_upstream
from tests.alignment.test_exactly_once import (
    START_TIMEOUT,
    Feeder,
    Reference,
    aligned_batches,
    counts_by_batch,
    reads_epoch,
    wait_until,
)
from tests.fixtures.kafka import KafkaBroker

pytestmark = pytest.mark.spark

# The steps, as input epochs relative to the swap epoch, with the swap's state the victim dies in.
STEPS = {-2: "planned", -1: "prepared", 0: "committed", 1: "handed over"}
DEADLINE = 600.0  # seconds for both jobs to prepare: a killed JVM starts again within it


@dataclass(frozen=True)
class Kill:
    swap: int
    victim: str
    role: str
    step: str
    epoch: int
    batch: int
    state: str
    at: float  # seconds into the test

    def __str__(self) -> str:
        where = f"epoch {self.epoch}, batch {self.batch}, swap {self.state}"
        return f"{self.at:4.0f} s swap {self.swap}: {self.role} job {self.victim} in {self.step} ({where})"


def victims(swap: int, old: str, new: str) -> dict[int, str]:
    """Who dies in which step of swap ``swap``: each (old/new, step) once over the two swaps."""
    first, second = (old, new) if swap == 1 else (new, old)
    return {-2: first, -1: second, 0: first, 1: second}


def running(checkpoint: Path, topic: str, epoch: int) -> int | None:
    """The batch of the job under ``checkpoint`` that reads ``epoch`` of ``topic`` and has not committed."""
    newest = PlannedOffsets(str(checkpoint), topic).newest()
    if newest is None or newest[1].epoch != epoch or Checkpoint(checkpoint).is_committed(newest[0]):
        return None
    return newest[0]


def expected(version: str, identifier: str) -> dict[str, Any]:
    """What relay version ``version`` writes for ``identifier`` (``tests.alignment.jobs.OUTPUTS``)."""
    found: dict[str, Any] = {"id": identifier, "n": len(identifier)}
    if version == "v3":
        found["upper"] = identifier.upper()
    return found


@pytest.mark.timeout(900)
def test_swapped_jobs_killed_at_every_step_write_every_record_exactly_once(
    spark: Any, kafka_broker: KafkaBroker, zk_connect: str, zk_client: KazooClient, tmp_path: Path
) -> None:
    register(spark)
    suffix = uuid.uuid4().hex[:12]
    source = kafka_broker.create_topic(f"swap-in-{suffix}", 2)
    output = kafka_broker.create_topic(f"swap-out-{suffix}", 2)

    def wiring(name: str, topic: str = source) -> Wiring:
        return Wiring(tmp_path / name, topic, kafka_broker.bootstrap, zk_connect)

    def relay(version: str) -> JobProcess:
        arguments = ["--job", f"relay-{version}", "--output", output, "--version", version]
        shadow = ["--shadow"] if version != "v1" else []
        return JobProcess("relay", wiring(version), arguments + shadow, tmp_path, name=version)

    feeder = Feeder(tmp_path / "input")
    relays = {version: relay(version) for version in ("v1", "v2", "v3")}
    subjects = SubjectRegistry(zk_client)
    swaps = SwapRegistry(zk_client)
    coordinator = SwapCoordinator(subjects, swaps)
    kills: list[Kill] = []
    queries: list[Any] = []
    reader: Reference | None = None
    # How often each relay dies yet.
    deaths = Counter([*victims(1, "v1", "v2").values(), *victims(2, "v2", "v3").values()])

    def live() -> list[JobProcess]:
        return [job for job in relays.values() if job.alive()]

    def settle(epoch: int, jobs: list[JobProcess] | None = None) -> None:
        """The relays ``jobs`` (None: every running one) committed their batch of input epoch ``epoch``."""
        for job in live() if jobs is None else jobs:
            wait_until(
                lambda: reads_epoch(job.wiring.checkpoint, source, epoch),  # noqa: B023 - used at once
                f"{job.name} (start {job.starts}) commits its batch of epoch {epoch}\n{job.log_tail()}",
                START_TIMEOUT,
                lambda: None,
            )

    def feed(epoch: int) -> None:
        feeder.feed()
        wait_until(
            lambda: epoch in subjects.epochs(source), f"input epoch {epoch}", START_TIMEOUT, lambda: None
        )

    def kill(number: int, victim: JobProcess, role: str, other: JobProcess, step: str, epoch: int) -> None:
        """``victim`` dies in its batch of ``epoch``, fed while ``other`` is paused."""
        wait_until(victim.warm, f"{victim.name}'s next process boots", START_TIMEOUT, lambda: None)
        other.pause()
        try:
            if epoch not in subjects.epochs(source):
                feed(epoch)
            wait_until(
                lambda: running(victim.wiring.checkpoint, source, epoch) is not None,
                f"{victim.name} runs its batch of epoch {epoch}\n{victim.log_tail()}",
                START_TIMEOUT,
                lambda: None,
            )
            batch = running(victim.wiring.checkpoint, source, epoch)
            victim.kill()
            record = swaps.get(output)
            state = "none" if record is None else record.state
            kills.append(
                Kill(
                    number,
                    victim.name,
                    role,
                    step,
                    epoch,
                    -1 if batch is None else batch,
                    state,
                    time.monotonic() - started,
                )
            )
        finally:
            other.resume()
        victim.start()
        deaths[victim.name] -= 1
        if deaths[victim.name]:  # a process booting for nothing would slow the other restarts
            victim.prewarm()

    def swap(number: int, old: str, new: str) -> SwapRecord:
        newest = subjects.epochs(source)[-1]
        record = coordinator.plan(output, f"relay-{old}", f"relay-{new}", deadline=DEADLINE)
        assert record.epoch == newest + 3  # the earliest: both prepare in the next epoch
        dying = victims(number, old, new)
        for delta, step in STEPS.items():
            epoch = record.epoch + delta
            name = dying[delta]
            other = relays[new if name == old else old]
            kill(number, relays[name], "old" if name == old else "new", other, step, epoch)
            # What the next step needs, no more, so that restarts overlap (a third job, in no
            # swap, may lag): both prepared before the commit epoch; the survivor's commit
            # before the swap epoch; nothing after the swap epoch, whose victim comes back
            # while the other job dies in the next.
            needs = {-2: [old, new], -1: [other.name], 0: []}.get(delta, [old, new])
            settle(epoch, [relays[n] for n in needs])
        finished = swaps.get(output)
        assert finished is not None and finished.id == record.id and finished.state == "done", finished
        return finished

    started = time.monotonic()
    try:
        feeder.feed()
        for job in relays.values():
            job.start()
        for job in relays.values():
            job.prewarm()  # the first kills wait for these, not for the relays' first batches
        queries.append(start_upstream(spark, wiring("upstream"), feeder.directory))
        # Supervised: on a busy machine its source's Python worker can miss Spark's fixed
        # wait to connect back, failing the query before it read anything.
        reader = Reference(spark, wiring("downstream", output), "reader", ID_OF_OUTPUT)
        wait_until(lambda: 0 in subjects.epochs(source), "input epoch 0", START_TIMEOUT, lambda: None)
        settle(0)
        print(f"relays running after {time.monotonic() - started:.0f} s")
        first = swap(1, "v1", "v2")
        relays["v1"].kill(standby=True)  # handed over: it would register nothing more
        second = swap(2, "v2", "v3")
        last_input = subjects.epochs(source)[-1]
        feed(last_input + 1)
        settle(last_input + 1)
        last = subjects.epochs(output)[-1]
        wait_until(
            lambda: reads_epoch(tmp_path / "downstream", output, last),
            f"the downstream job reads epoch {last} of the output",
            START_TIMEOUT,
            reader.supervise,
        )
        assert reader.query.isActive and reader.query.exception() is None
        assert all(LAUNCH_FAILURE in failure for failure in reader.failures), reader.failures
    finally:
        for job in relays.values():
            job.resume()
            job.kill(standby=True)
        for query in queries:
            query.stop()
        if reader is not None:
            reader.stop()
        close_shared_clients()
    print(f"swapped in {time.monotonic() - started:.0f} s; killed:", *kills, sep="\n  ")
    failed = {job.name: job.log_path.read_text().count("query failed") for job in relays.values()}
    print("failed on their own and restarted:", failed)
    assert sorted((k.role, k.step) for k in kills) == sorted(
        (r, s) for r in ("new", "old") for s in STEPS.values()
    )
    # With the other job paused, the victim dies in the step's state (or just after its own step moved it).
    # After the swap epoch: done, or committed when the old job died in the swap epoch (the new one holds).
    allowed = {"planned": {"planned"}, "prepared": {"prepared", "committed"}}
    assert all(k.state in allowed.get(k.step, {"committed", "done"}) for k in kills), kills

    # The swaps: done, each new job's output following the old job's last epoch.
    assert [(r.id, r.state) for r in [*swaps.past(output), second]] == [(1, "done"), (2, "done")]
    assert first.handover is not None and second.handover is not None
    owners = {"relay-v1": "v1", "relay-v2": "v2", "relay-v3": "v3"}

    # OUT: one unbroken sequence of epochs, each written by its owner.
    epochs = [e for k in subjects.epochs(output) if (e := subjects.get_epoch(output, k)) is not None]
    assert [e.epoch for e in epochs] == list(range(len(epochs)))
    writers = [owners[e.writer] for e in epochs]
    assert writers == [
        "v1" if e.epoch <= first.handover else "v2" if e.epoch <= second.handover else "v3" for e in epochs
    ]

    # Every input id exactly once, computed by its writer's version, epoch by epoch in the input's order.
    records = {e.epoch: [json.loads(row[0]) for row in read_epoch(kafka_broker, e)] for e in epochs}
    input_epochs = [
        sorted(row[0] for row in read_epoch(kafka_broker, e))
        for k in subjects.epochs(source)
        if (e := subjects.get_epoch(source, k)) is not None
    ]
    output_ids = [sorted(r["id"] for r in records[e.epoch]) for e in epochs if records[e.epoch]]
    assert output_ids == [ids for ids in input_epochs if ids], "each output epoch holds one input epoch's ids"
    assert sorted(i for ids in output_ids for i in ids) == sorted(feeder.ids)  # 0 lost, 0 doubled
    for e, writer in zip(epochs, writers, strict=True):
        assert [r for r in records[e.epoch]] == [expected(writer, r["id"]) for r in records[e.epoch]]
    shared = [
        k for k, w in enumerate(writers) if w == "v2" and records[k]
    ]  # v2's epochs: what v1 computes for them
    assert shared and all(records[k] == [expected("v1", r["id"]) for r in records[k]] for k in shared)

    # The downstream job: one batch per output epoch, in order, and each id counted once.
    batches = aligned_batches(tmp_path / "downstream", output)
    read = [batches[b].epoch for b in sorted(batches) if batches[b].epoch not in (None, -1)]
    assert read == list(range(len(epochs))), read
    newest = max(batches)
    assert counts_by_batch(spark, tmp_path / "downstream", [newest])[newest] == dict.fromkeys(feeder.ids, 1)
