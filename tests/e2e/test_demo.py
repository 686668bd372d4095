"""The README's first command works: the demo runs end to end, its checks hold, and it ends cleanly."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

# What a newcomer must not see on the terminal: Java stack traces, Spark's and
# Kafka's chatter. They belong in the log files the demo names.
NOT_ON_THE_TERMINAL = ("Exception in thread", "\tat org.apache", "StackOverflowError", "WARN ", "rdkafka")
# What no log may hold after a clean run: a batch cut off by the stop, a dead stream thread.
NOT_IN_THE_LOGS = ("StackOverflowError", "Exception in thread", "is aborting", "aborted: subject")


def assert_ends_cleanly(result: subprocess.CompletedProcess[str], nonempty: set[str]) -> None:
    """The terminal tells only the demo's story, the logs it names exist (those in ``nonempty``
    with something in them), and none of them shows an aborted batch or a dead query thread."""
    terminal = result.stdout + result.stderr
    for text in NOT_ON_THE_TERMINAL:
        assert text not in terminal, f"{text!r} on the terminal:\n{terminal[-5000:]}"
    named = re.search(r"logs: (\S+)/ \(([^)]*)\)", result.stdout)
    assert named is not None, result.stdout[-3000:]
    directory = Path(named.group(1))
    files = {name: directory / name for name in named.group(2).split(", ")}
    assert nonempty <= set(files), files
    for name, path in files.items():
        assert path.is_file(), f"{path} missing"
        text = path.read_text(errors="replace")
        assert name not in nonempty or text, f"{path} is empty"
        for fault in NOT_IN_THE_LOGS:
            assert fault not in text, f"{fault!r} in {path}"


def run_demo(workdir: Path, command: str, *options: str) -> subprocess.CompletedProcess[str]:
    """``epochstate <command> <options> --workdir <workdir>`` run to its end (and succeeded);
    its output is printed, for -s."""
    result = subprocess.run(
        [sys.executable, "-m", "epochstate.cli.app", command, *options, "--workdir", str(workdir)],
        capture_output=True,
        text=True,
        timeout=560,  # the demo's own patience, within the test's
        env={**os.environ, "COLUMNS": "200"},
    )
    print(result.stdout)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return result


@pytest.mark.timeout(600)
def test_demo_runs_and_pinned_answers_hold(tmp_path: Path) -> None:
    result = run_demo(tmp_path, "demo", "--duration", "4", "--interval", "2", "--trigger", "1")
    assert "asked again -> identical" in result.stdout
    assert "DIFFERENT" not in result.stdout
    assert "Spark's own state reader" in result.stdout
    assert_ends_cleanly(result, {"spark.log", "daemon.log", "zookeeper.log", "demo.log"})
