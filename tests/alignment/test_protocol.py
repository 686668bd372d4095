"""The alignment protocol on real Spark queries: CatchUp -> Ready -> Align(k) -> aligned; Abort.

One scenario (``protocol_run``), run once, over a two-partition subject; the
downstream query reads at most two offsets per batch while unaligned, one
trigger a second:

1. Upstream writes epochs 0-2. The reader starts unaligned.
2. CatchUp, and Abort while the reader is still catching up.
3. CatchUp again until Ready; ``epochstate align align --epoch 4`` through the CLI.
   The reader holds until epoch 3 is registered, and is restarted while it holds;
   then it reads up to the start of epoch 4 in one unaligned batch, then epoch 4
   in one batch.
4. The reader is stopped while aligned and loses its commit of the batch that read
   epoch 4 (as if the driver died mid-way); epoch 5 is written, the reader restarts.
5. Abort while aligned; epoch 6 is read unaligned.
"""

from __future__ import annotations

import json
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from kazoo.client import KazooClient
from kazoo.recipe.watchers import DataWatch
from typer.testing import CliRunner

from epochstate.cli.app import app
from epochstate.core.alignment.commands import Command, Report
from epochstate.core.alignment.coordinator import AlignmentCoordinator
from epochstate.spark_plugin.alignment import (
    SourceRecord,
    SubjectEpoch,
    SubjectOffset,
    SubjectRegistry,
    register,
)
from epochstate.spark_plugin.alignment.planned import PlannedOffsets
from tests.alignment.conftest import (
    DownstreamJob,
    ReadRow,
    UpstreamJob,
    forget_commit,
    fresh_topic,
    read_epoch,
)
from tests.fixtures.kafka import KafkaBroker
from tests.fixtures.zookeeper import eventually

pytestmark = [pytest.mark.spark, pytest.mark.timeout(600)]

JOB = "reader-p"
ROWS_PER_EPOCH = 4
ALIGN_AT = 4
MAX_OFFSETS = 2  # per unaligned batch
TIMEOUT = 90.0


class ReportLog:
    """Every report the source wrote, in order, as a ZooKeeper data watch saw them."""

    def __init__(self, client: KazooClient, path: str, topic: str) -> None:
        self.reports: list[Report] = []
        self._changed = threading.Condition()
        self._topic = topic
        DataWatch(client, path, self._on_data)

    def _on_data(self, data: bytes | None, _: Any) -> None:
        if data is None:
            return
        report = SourceRecord.decode(self._topic, JOB, data).report
        with self._changed:
            if report is not None and (not self.reports or self.reports[-1] != report):
                self.reports.append(report)
            self._changed.notify_all()

    def wait_for(self, wanted: Callable[[Report], bool], timeout: float = TIMEOUT) -> Report:
        with self._changed:
            found = self._changed.wait_for(
                lambda: next((r for r in self.reports if wanted(r)), None), timeout
            )
        assert found is not None, f"no such report within {timeout} s; saw {self.states()}"
        return found

    def states(self) -> list[tuple[str, int | None]]:
        with self._changed:
            return [(r.state, r.answers) for r in self.reports]


@dataclass
class ProtocolRun:
    topic: str
    upstream: UpstreamJob
    reader: DownstreamJob
    epochs: dict[int, SubjectEpoch]
    commands: dict[str, Command]
    reports: ReportLog
    cli: dict[str, Any]  # step -> what the CLI printed and returned
    planned: dict[int, SubjectOffset]  # the reader's end offset of each batch
    first_after: dict[str, int]  # step -> the reader's first batch planned after it
    reran: int  # the aligned batch whose commit was lost
    record: SourceRecord
    watermarks: dict[int, int]


def run_cli(*args: str) -> Any:
    return CliRunner().invoke(app, ["align", *args], catch_exceptions=False)


@pytest.fixture(scope="module")
def protocol_run(
    spark: Any,
    kafka_broker: KafkaBroker,
    subjects_zookeeper: tuple[str, KazooClient],
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[ProtocolRun]:
    register(spark)
    connect, client = subjects_zookeeper
    topic = fresh_topic(kafka_broker, 2)
    directory = tmp_path_factory.mktemp("protocol")
    registry = SubjectRegistry(client)
    coordinator = AlignmentCoordinator(registry)
    upstream = UpstreamJob(spark, directory / "upstream", topic, kafka_broker, connect)
    options = {"mode": "unaligned", "maxOffsetsPerTrigger": str(MAX_OFFSETS)}
    reader = DownstreamJob(spark, directory / JOB, topic, kafka_broker, connect, JOB, options, "1 second")
    commands: dict[str, Command] = {}
    cli: dict[str, Any] = {}
    first_after: dict[str, int] = {}

    def feed(epoch: int) -> None:
        upstream.feed([f"e{epoch}-{i}" for i in range(ROWS_PER_EPOCH)])

    def planned_batches() -> list[int]:
        offsets = reader.checkpoint / "offsets"
        return sorted(int(p.name) for p in offsets.iterdir() if p.name.isdigit()) if offsets.exists() else []

    def mark(step: str) -> None:
        first_after[step] = (planned_batches() or [-1])[-1] + 1

    def read_everything() -> bool:
        total = sum(len(batch) for batch in upstream.fed)
        return sum(len(rows) for rows in reader.rows().values()) >= total

    try:
        upstream.start()
        for epoch in range(3):
            feed(epoch)
        reports = ReportLog(client, registry.layout.source(topic, JOB), topic)
        reader.start()
        # Two offsets a second: the reader needs a few seconds to pass epoch 1's end.
        assert eventually(lambda: registry.get_source(topic, JOB) is not None, TIMEOUT)

        commands["catch-up"] = coordinator.catch_up(topic, JOB)
        reports.wait_for(lambda r: r.answers == commands["catch-up"].id and r.state == "catching-up")
        commands["abort-catching-up"] = coordinator.abort(topic, JOB)
        coordinator.wait(topic, JOB, commands["abort-catching-up"], TIMEOUT)

        commands["catch-up-again"] = coordinator.catch_up(topic, JOB)
        coordinator.wait(topic, JOB, commands["catch-up-again"], TIMEOUT)
        assert eventually(read_everything, TIMEOUT)
        cli["align"] = run_cli("align", topic, JOB, "--epoch", str(ALIGN_AT), "-z", connect)
        align = coordinator.source(topic, JOB).record.command
        assert align is not None and align.epoch == ALIGN_AT
        commands["align"] = align
        reports.wait_for(lambda r: r.answers == commands["align"].id and r.state == "aligning")
        mark("align")
        # Restarted while it holds for epoch 3: the command is in ZooKeeper, so it holds again
        # (a first trigger of the new run has asked the source and planned nothing).
        reader.query.processAllAvailable()
        reader.stop()
        reader.start()
        assert eventually(lambda: reader.query.lastProgress is not None, TIMEOUT)
        mark("holding-restart")
        feed(3)
        coordinator.wait(topic, JOB, commands["align"], TIMEOUT)
        feed(4)
        assert eventually(read_everything, TIMEOUT)

        reader.query.processAllAvailable()
        reader.stop()
        reran = planned_batches()[-1]
        forget_commit(reader.checkpoint, reran)
        feed(5)
        mark("restart")
        reader.start()
        assert eventually(read_everything, TIMEOUT)
        reports.wait_for(lambda r: r.state == "aligned" and r.subject_epoch == 5)
        cli["status-aligned"] = run_cli("status", topic, "-z", connect, "--json")

        commands["abort-aligned"] = coordinator.abort(topic, JOB)
        coordinator.wait(topic, JOB, commands["abort-aligned"], TIMEOUT)
        mark("abort-aligned")
        feed(6)
        assert eventually(read_everything, TIMEOUT)
        reader.query.processAllAvailable()
        record = registry.get_source(topic, JOB)
        assert record is not None
        log = PlannedOffsets(str(reader.checkpoint), topic)
        yield ProtocolRun(
            topic=topic,
            upstream=upstream,
            reader=reader,
            epochs={k: e for k in registry.epochs(topic) if (e := registry.get_epoch(topic, k)) is not None},
            commands=commands,
            reports=reports,
            cli=cli,
            planned={b: log.offset(b) for b in planned_batches()},
            first_after=first_after,
            reran=reran,
            record=record,
            watermarks=kafka_broker.admin.high_watermarks(topic),
        )
    finally:
        reader.stop()
        upstream.stop()


def batches_from(run: ProtocolRun, step: str, until: str | None = None) -> list[int]:
    end = run.first_after[until] if until else max(run.planned) + 1
    return [b for b in sorted(run.planned) if run.first_after[step] <= b < end]


def rows_of(run: ProtocolRun, batch: int) -> list[ReadRow]:
    return run.reader.runs[batch][-1].rows if batch in run.reader.runs else []


def test_abort_while_catching_up_returns_to_unaligned(protocol_run: ProtocolRun) -> None:
    catch_up, abort = protocol_run.commands["catch-up"], protocol_run.commands["abort-catching-up"]
    states = protocol_run.reports.states()
    assert ("catching-up", catch_up.id) in states
    assert states.index(("unaligned", abort.id)) > states.index(("catching-up", catch_up.id))


def test_ready_once_past_the_second_to_last_epoch(protocol_run: ProtocolRun) -> None:
    command = protocol_run.commands["catch-up-again"]
    ready = protocol_run.reports.wait_for(lambda r: r.answers == command.id and r.state == "ready")
    second_to_last = protocol_run.epochs[1]  # epochs 0-2 were registered while it caught up
    assert ready.subject_epoch == 1
    assert all(ready.position.get(p, 0) >= end for p, end in second_to_last.end_position.items())
    before = [r for r in protocol_run.reports.reports if r.answers == command.id and r.state == "catching-up"]
    for report in before:
        assert any(report.position.get(p, 0) < e for p, e in second_to_last.end_position.items())


def test_align_reads_up_to_the_epoch_start_then_one_epoch_per_batch(
    protocol_run: ProtocolRun, kafka_broker: KafkaBroker
) -> None:
    result = protocol_run.cli["align"]
    assert result.exit_code == 0, result.output
    assert f"align({ALIGN_AT})" in result.output
    run = protocol_run
    batches = [b for b in batches_from(run, "align", "restart") if run.planned[b].aligned]
    transition, aligned = batches[0], batches[1:]
    assert run.planned[transition - 1].epoch is None
    assert run.planned[transition] == SubjectOffset(
        run.topic, ALIGN_AT - 1, {**run.planned[transition - 1].positions, **run.epochs[3].end_position}
    )
    assert rows_of(run, transition), "epoch 3 was written after Align: the switching batch reads it"
    assert {row[3] for row in rows_of(run, transition)} == {None}
    assert [run.planned[b].epoch for b in aligned] == [ALIGN_AT]
    assert rows_of(run, aligned[0]) == read_epoch(kafka_broker, run.epochs[ALIGN_AT])
    assert run.record.mapping[aligned[0]] == ALIGN_AT


def test_restart_while_holding_for_the_epoch_before_align(protocol_run: ProtocolRun) -> None:
    run = protocol_run
    assert batches_from(run, "align", "holding-restart") == [], "nothing is read while it holds"
    transition = batches_from(run, "holding-restart", "restart")[0]
    assert run.planned[transition].epoch == ALIGN_AT - 1, "the first batch after it ends at epoch 4's start"
    # The restarted run carried out the command given to the run before it.
    aligned = run.reports.wait_for(lambda r: r.answers == run.commands["align"].id and r.state == "aligned")
    assert aligned.subject_epoch == ALIGN_AT - 1 and aligned.batch == transition


def test_restart_mid_batch_while_aligned_reads_the_same_epoch_again(
    protocol_run: ProtocolRun, kafka_broker: KafkaBroker
) -> None:
    run = protocol_run
    first, again = run.reader.runs[run.reran]
    assert run.planned[run.reran].epoch == ALIGN_AT
    assert first.rows == again.rows == read_epoch(kafka_broker, run.epochs[ALIGN_AT])
    assert run.record.mapping[run.reran] == ALIGN_AT, "the mapping is unchanged"


def test_restart_while_aligned_goes_on_aligned(protocol_run: ProtocolRun, kafka_broker: KafkaBroker) -> None:
    run = protocol_run
    after = [b for b in batches_from(run, "restart", "abort-aligned") if rows_of(run, b)]
    assert [run.planned[b].epoch for b in after] == [5]
    assert rows_of(run, after[0]) == read_epoch(kafka_broker, run.epochs[5])
    assert run.record.mapping[after[0]] == 5
    result = run.cli["status-aligned"]
    assert result.exit_code == 0, result.output
    [row] = json.loads(result.output)
    assert (row["job"], row["mode"], row["state"], row["subject_epoch"]) == (JOB, "aligned", "aligned", 5)
    assert row["position"] == {str(p): o for p, o in sorted(run.epochs[5].end_position.items())}


def test_abort_while_aligned_goes_on_unaligned(protocol_run: ProtocolRun) -> None:
    run = protocol_run
    after = batches_from(run, "abort-aligned")
    assert after and all(run.planned[b].epoch is None for b in after)
    rows = [row for b in after for row in rows_of(run, b)]
    assert sorted(row[0] for row in rows) == sorted(run.upstream.fed[6])
    assert {row[3] for row in rows} == {None}
    assert all(len(rows_of(run, b)) <= MAX_OFFSETS for b in after), "maxOffsetsPerTrigger applies again"
    assert run.record.report is not None and run.record.report.state == "unaligned"
    assert run.record.mode == "unaligned"


def test_every_record_is_read_exactly_once(protocol_run: ProtocolRun) -> None:
    run = protocol_run
    read = Counter((row[1], row[2]) for b in run.reader.runs for row in rows_of(run, b))
    expected = Counter((p, offset) for p, end in run.watermarks.items() for offset in range(end))
    assert read == expected
    values = sorted(row[0] for b in run.reader.runs for row in rows_of(run, b))
    assert values == sorted(v for batch in run.upstream.fed for v in batch)
