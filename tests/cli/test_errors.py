"""Every failure: one line on stderr, ``error: ...``, nothing on stdout, the documented exit code."""

from __future__ import annotations

import json
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from subprocess import CompletedProcess

from tests.cli.conftest import Served
from tests.cli.invoke import epochstate, free_target


def _each(target: str, cases: list[tuple[str, ...]]) -> list[CompletedProcess[str]]:
    """``epochstate ARGS --target TARGET`` for each ARGS, a few at once: each is a
    process of its own that mostly starts up or waits for its answer."""
    with ThreadPoolExecutor(4) as commands:
        return list(commands.map(lambda args: epochstate(target, *args), cases))


def one_error_line(done: CompletedProcess[str]) -> str:
    assert done.stdout == ""
    [line] = done.stderr.splitlines()
    assert line.startswith("error: "), line
    return line


def test_errors_are_one_line_with_the_documented_exit_code(served: Served) -> None:
    target = served.daemon.target
    newest = served.newest()
    wide = json.dumps({"customer_region_identifier": "eu-west", "nope": 1})
    cases: list[tuple[tuple[str, ...], int, str]] = [
        (("get", "missing-job", "x"), 3, "missing-job"),
        (("get", "spend", "[1, 2]"), 4, "string"),
        (("get", "spend", wide), 4, "unknown field"),
        (("get", "spend", '["eu-west", "a"]', "--epoch", str(newest + 50)), 5, "not committed yet"),
        (("get", "spend", "x", "--epoch", "soon"), 2, "--epoch"),
        (("get", "spend"), 2, "Missing argument"),
        (("scan", "spend", "--bogus"), 2, "--bogus"),
        (("scan", "spend", "--prefix", "[unclosed"), 2, "prefix must be JSON"),
        (("scan", "missing-job", "--json"), 3, "missing-job"),
        (("describe", "missing-job", "--json"), 3, "missing-job"),
        (("watch", "missing-job", "--json"), 3, "missing-job"),
        (("nope",), 2, "nope"),
    ]
    for (args, code, text), done in zip(cases, _each(target, [args for args, _, _ in cases]), strict=True):
        line = one_error_line(done)
        assert (done.returncode, text in line) == (code, True), (args, done.returncode, line)


def test_an_unreachable_daemon_is_exit_code_6() -> None:
    cases = [("jobs", "--timeout", "1"), ("get", "spend", "x", "--timeout", "1"), ("watch", "spend")]
    for done in _each(free_target(), cases):
        assert done.returncode == 6, done.stderr
        assert "UNAVAILABLE" in one_error_line(done)


def test_usage_errors_are_one_line_and_no_arguments_show_the_help() -> None:
    def run(*args: str) -> CompletedProcess[str]:
        command = [sys.executable, "-m", "epochstate.cli", *args]
        return subprocess.run(command, capture_output=True, text=True, timeout=60)

    for args in ((), ("align",)):
        done = run(*args)
        assert (done.returncode, "Usage: epochstate" in done.stdout) == (0, True), done
    done = run("align", "status")
    assert done.returncode == 2
    assert one_error_line(done) == "error: Missing argument 'topic'. (see 'epochstate align status --help')"
    done = run("watch", "spend", "--count", "-1")
    assert done.returncode == 2 and "--count" in one_error_line(done)
