"""The coordinator and ``epochstate align`` against a real ZooKeeper; the source's side is its znode.

The source's answers are written here the way the source writes them
(``SubjectRegistry.update_source``); the Spark source itself is in test_protocol.
"""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from kazoo.client import KazooClient
from typer.testing import CliRunner

from epochstate.cli.app import app
from epochstate.core.alignment.commands import Report, State
from epochstate.core.alignment.coordinator import AlignmentCoordinator
from epochstate.spark_plugin.alignment import (
    InvalidTransition,
    NotAnswered,
    SourceNotFound,
    SourceRecord,
    SubjectEpoch,
    SubjectNotFound,
    SubjectRegistry,
)
from epochstate.spark_plugin.kafka import OffsetRange
from tests.fixtures.daemon import DaemonProcess
from tests.fixtures.zookeeper import eventually

TOPIC, JOB = "t", "reader"


def subject(registry: SubjectRegistry) -> None:
    """Epoch 0: p0 [0, 4), p1 [0, 2); epoch 1: p1 [2, 5); and a source, unaligned."""
    first = SubjectEpoch(TOPIC, 0, (OffsetRange(TOPIC, 0, 0, 4), OffsetRange(TOPIC, 1, 0, 2)), "up", "q", 1)
    registry.register_epoch(first)
    registry.register_epoch(
        SubjectEpoch(TOPIC, 1, (OffsetRange(TOPIC, 1, 2, 5),), "up", "q", 2, first.end_position)
    )
    registry.register_source(TOPIC, JOB, "unaligned")


def answer(
    registry: SubjectRegistry,
    state: State,
    position: dict[int, int],
    subject_epoch: int | None = None,
    batch: int | None = None,
    refused: str | None = None,
) -> None:
    """Report ``state`` to the newest command, as the source does."""

    def change(record: SourceRecord) -> SourceRecord:
        answers = None if record.command is None else record.command.id
        return replace(record, report=Report(state, position, subject_epoch, batch, answers, refused))

    registry.update_source(TOPIC, JOB, change)


@pytest.fixture
def registry(zk_client: KazooClient) -> SubjectRegistry:
    found = SubjectRegistry(zk_client)
    subject(found)
    return found


def test_commands_are_numbered_and_leave_the_sources_fields(registry: SubjectRegistry) -> None:
    registry.record_mapping(TOPIC, JOB, "aligned", [(7, 1)], keep=10)
    coordinator = AlignmentCoordinator(registry)
    first = coordinator.catch_up(TOPIC, JOB)
    second = coordinator.abort(TOPIC, JOB)
    assert (first.name, first.id, second.name, second.id) == ("catch-up", 1, "abort", 2)
    status = coordinator.source(TOPIC, JOB)
    assert status.record.command == second and dict(status.record.mapping) == {7: 1}
    assert not status.answered
    answer(registry, "unaligned", {0: 4, 1: 5})
    assert coordinator.source(TOPIC, JOB).answered
    with pytest.raises(SourceNotFound):
        coordinator.abort(TOPIC, "nobody")
    with pytest.raises(SubjectNotFound):
        coordinator.status("unknown")


def test_align_needs_ready_and_an_epoch_not_passed(registry: SubjectRegistry) -> None:
    coordinator = AlignmentCoordinator(registry)
    with pytest.raises(InvalidTransition, match="ready"):
        coordinator.align(TOPIC, JOB)
    coordinator.catch_up(TOPIC, JOB)
    answer(registry, "ready", {0: 4, 1: 3})
    with pytest.raises(InvalidTransition, match="partition 1 is at offset 3"):
        coordinator.align(TOPIC, JOB, 1)
    command = coordinator.align(TOPIC, JOB)
    assert (command.name, command.epoch) == ("align", 2), "the first epoch the position has not passed"
    answer(registry, "aligning", {0: 4, 1: 3})
    with pytest.raises(InvalidTransition, match="abort it first"):
        coordinator.catch_up(TOPIC, JOB)


def test_wait_returns_the_answer_or_times_out(registry: SubjectRegistry) -> None:
    coordinator = AlignmentCoordinator(registry)
    command = coordinator.catch_up(TOPIC, JOB)
    with pytest.raises(NotAnswered, match="catch-up"):
        coordinator.wait(TOPIC, JOB, command, 0.2)
    answer(registry, "catching-up", {0: 0, 1: 0})
    later = threading.Timer(0.3, lambda: answer(registry, "ready", {0: 4, 1: 5}, subject_epoch=0))
    later.start()
    report = coordinator.wait(TOPIC, JOB, command, 10)
    later.join()
    assert (report.state, report.subject_epoch, report.answers) == ("ready", 0, command.id)


def cli(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, ["align", *args], catch_exceptions=False)
    return result.exit_code, result.output


def test_cli_help_renders() -> None:
    for command in ("status", "catch-up", "align", "abort", "prune"):
        code, output = cli(command, "--help")
        assert code == 0 and "EPOCHSTATE_ZOOKEEPER" in output, output


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture(params=["zookeeper", "daemon"])
def reach(request: pytest.FixtureRequest, zk_connect: str, tmp_path: Path) -> Iterator[list[str]]:
    """How ``epochstate align`` reaches the sources: ZooKeeper, or a daemon (``--target``)."""
    if request.param == "zookeeper":
        yield ["--zookeeper", zk_connect]
        return
    daemon = DaemonProcess(tmp_path / "daemon", {}, zookeeper=zk_connect, env={"EPOCHSTATE_NODE": "cli"})
    daemon.start()
    try:
        yield ["--target", daemon.target]
    finally:
        daemon.stop()


def test_cli_commands_status_and_exit_codes(registry: SubjectRegistry, reach: list[str]) -> None:
    """The same output and exit codes whichever way the CLI goes."""
    z = reach
    via_daemon = z[0] == "--target"
    code, output = cli("catch-up", TOPIC, JOB, *z)
    assert (code, "sent catch-up (command 1)" in output) == (0, True), output
    answer(registry, "ready", {0: 4, 1: 5}, subject_epoch=0, batch=3)
    code, output = cli("status", TOPIC, *z, "--json")
    assert code == 0, output
    [row] = json.loads(output)
    assert row | {"updated_at_ms": 0} == {
        "job": JOB,
        "mode": "unaligned",
        "state": "ready",
        "command": "catch-up",
        "command_id": 1,
        "answered": True,
        "subject_epoch": 0,
        "batch": 3,
        "position": {"0": 4, "1": 5},
        "refused": None,
        "updated_at_ms": 0,
    }
    code, output = cli("status", TOPIC, *z)
    assert code == 0 and JOB in output and "ready" in output and "0:4, 1:5" in output, output

    assert cli("align", TOPIC, JOB, *z, "--epoch", "1")[0] == 4, "epoch 1 is passed"
    code, output = cli("align", TOPIC, JOB, *z, "--wait", "0.3")
    assert code == 5 and "align(2)" in output, output
    answer(registry, "ready", {0: 4, 1: 6}, refused="moved on")  # refused align(2): ready for another

    def refuse_align_3() -> None:
        # As the source does: answer align(3) once it is the newest command (never the one before).
        def issued() -> bool:
            record = registry.get_source(TOPIC, JOB)
            command = None if record is None else record.command
            return command is not None and command.name == "align" and command.epoch == 3

        eventually(issued, 60, 0.05)  # else the CLI's wait below ends unanswered: the test fails
        answer(registry, "ready", {0: 4, 1: 6}, refused="passed it")

    later = threading.Thread(target=refuse_align_3)
    later.start()
    code, output = cli("align", TOPIC, JOB, *z, "--epoch", "3", "--wait", "60")
    later.join()
    assert code == 4 and "refused align(3): passed it" in " ".join(output.split()), output
    assert cli("abort", TOPIC, "nobody", *z)[0] == 3
    assert cli("status", "unknown", *z)[0] == 3
    assert cli("status", "bad/topic", *z)[0] == 4
    assert cli("abort", TOPIC, *z)[0] == 2, "no job"
    if via_daemon:
        assert cli("status", TOPIC, "-t", f"127.0.0.1:{free_port()}", "--timeout", "1")[0] == 6
    else:
        assert cli("status", TOPIC, *z, "--root", "relative")[0] == 2
        assert cli("status", TOPIC, "-z", f"127.0.0.1:{free_port()}", "--timeout", "1")[0] == 6

    # Retention: the refused align(3) is the newest command, so epoch 2 (its start) stays.
    for k in (2, 3, 4):
        before = registry.get_epoch(TOPIC, k - 1)
        assert before is not None
        registry.register_epoch(SubjectEpoch(TOPIC, k, (), "up", "q", k, before.end_position))
    code, output = cli("prune", TOPIC, *z, "--keep", "2", "--dry-run", "--json")
    assert code == 0 and json.loads(output)["deleted"] == [], output
    assert json.loads(output)["horizon"] == 2 and registry.epochs(TOPIC) == [0, 1, 2, 3, 4], output
    code, output = cli("prune", TOPIC, *z, "--keep", "2")
    assert code == 0 and "waits to align at 3" in output and "deleted epochs 0..1" in output, output
    assert cli("abort", TOPIC, JOB, *z)[0] == 0
    code, output = cli("prune", TOPIC, *z, "--keep", "2")
    assert code == 0 and "the 2 newest epochs are kept" in output and registry.epochs(TOPIC) == [3, 4], output
    assert cli("prune", "unknown", *z)[0] == 3
    assert cli("prune", TOPIC, *z, "--keep", "1")[0] == 2
