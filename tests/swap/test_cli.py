"""``epochstate swap plan|status|abort`` straight on ZooKeeper and through a daemon's AlignmentAdmin:
the same output and exit codes either way."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from kazoo.client import KazooClient
from typer.testing import CliRunner

from epochstate.cli.app import app
from epochstate.core.alignment.subjects import SubjectRegistry
from epochstate.core.swap.participant import SwapParticipant
from epochstate.core.swap.registry import SwapRegistry
from tests.fixtures.daemon import DaemonProcess
from tests.swap.jobs import IN, NEW, OLD, OUT, prepare_subjects


def cli(*args: str) -> tuple[int, str]:
    """The exit code and the output, its lines joined (long error lines wrap)."""
    result = CliRunner().invoke(app, list(args))
    return result.exit_code, result.output if "--json" in args else " ".join(result.output.split())


@pytest.fixture(params=["zookeeper", "daemon"])
def reach(request: pytest.FixtureRequest, zk_connect: str, tmp_path: Path) -> Iterator[list[str]]:
    if request.param == "zookeeper":
        yield ["--zookeeper", zk_connect]
        return
    daemon = DaemonProcess(tmp_path / "daemon", {}, zookeeper=zk_connect, env={"EPOCHSTATE_NODE": "swap"})
    daemon.start()
    try:
        yield ["--target", daemon.target]
    finally:
        daemon.stop()


def test_help_renders() -> None:
    for command in ("plan", "status", "abort"):
        code, output = cli("swap", command, "--help")
        assert code == 0 and "--subject" in output, output


def test_plan_status_abort_and_the_refusals(zk_client: KazooClient, reach: list[str]) -> None:
    subjects = SubjectRegistry(zk_client)
    prepare_subjects(subjects, old_at=4, new_at=3)
    s = ["--subject", OUT]
    assert cli("swap", "status", *s, *reach)[0] == 3  # no swap yet
    code, output = cli("swap", "plan", *s, "--from", OLD, "--to", NEW, "--at", "5", *reach)
    assert code == 4 and "SWAP_EPOCH_PASSED" in output and "the earliest is 6" in output, output
    code, output = cli("swap", "plan", *s, "--from", OLD, "--to", "nobody", *reach)
    assert code == 4 and "JOBS_NOT_ALIGNED" in output, output
    code, output = cli("swap", "plan", *s, "--from", OLD, "--to", NEW, "--json", *reach)
    assert code == 0, output
    planned = json.loads(output)
    assert {k: planned[k] for k in ("id", "input", "from", "to", "epoch", "prepare_epoch", "state")} == {
        "id": 1,
        "input": IN,
        "from": OLD,
        "to": NEW,
        "epoch": 6,
        "prepare_epoch": 4,
        "state": "planned",
    }
    code, output = cli("swap", "status", *s, "--json", *reach)
    assert code == 0 and json.loads(output) == planned, output
    code, output = cli("swap", "plan", *s, "--from", OLD, "--to", NEW, *reach)
    assert code == 4 and "SWAP_IN_FLIGHT" in output, output
    code, output = cli("swap", "abort", *s, *reach)
    assert code == 0 and "aborted (ABORTED_BY_REQUEST)" in output, output

    code, output = cli("swap", "plan", *s, "--from", OLD, "--to", NEW, "--at", "7", *reach)
    assert code == 0 and "swap 2 of 'counts': counts-v1 -> counts-v2 at epoch 7" in output, output
    for job in (OLD, NEW):
        SwapParticipant(SwapRegistry(zk_client), subjects, OUT, job).step(5)
    SwapParticipant(SwapRegistry(zk_client), subjects, OUT, OLD).step(6)
    code, output = cli("swap", "abort", *s, *reach)
    assert code == 4 and "SWAP_COMMITTED" in output, output
    code, output = cli("swap", "status", *s, *reach)
    assert code == 0 and "committed in epoch 6 of counts-v1" in output, output
    assert cli("swap", "status", "--subject", "nowhere", *reach)[0] == 3
