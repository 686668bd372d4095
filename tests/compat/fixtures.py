"""The compatibility suite's fixtures: each Spark release's workload, run once per test
session in that release's own interpreter (see ``runner``), and a way to print
progress past pytest's capture (a cold venv downloads for minutes).

A plugin of the whole test session (tests/conftest.py lists it), not this folder's
conftest, so that the session can start the workloads in the background from its
first test (:func:`compat_workloads_ahead`).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from epochstate.devtools.zookeeper import EmbeddedZooKeeper
from tests.compat.continuation import Continuations
from tests.compat.releases import UNDER_TEST
from tests.compat.runner import ReleaseRunner, Say, release_path
from tests.fixtures.kafka import KafkaBroker


@pytest.fixture(scope="session")
def say(pytestconfig: pytest.Config) -> Say:
    """Print a progress line to the terminal, whatever pytest captures."""
    capture = pytestconfig.pluginmanager.getplugin("capturemanager")

    def say(line: str) -> None:
        with capture.global_and_fixture_disabled():
            print(f"\n[compat] {line}", flush=True)

    return say


@pytest.fixture(scope="session")
def releases(
    spark: Any,
    tmp_path_factory: pytest.TempPathFactory,
    zookeeper_server: EmbeddedZooKeeper,
    kafka_broker: KafkaBroker,
    say: Say,
) -> Iterator[ReleaseRunner]:
    """Each release's workload run, made on first use (or ahead of it) and kept for the session."""
    base = tmp_path_factory.mktemp("compat")
    runner = ReleaseRunner(
        base / "runs", release_path(base / "path"), spark, zookeeper_server, kafka_broker, say
    )
    try:
        yield runner
    finally:
        runner.close()


@pytest.fixture(scope="session")
def continuations(releases: ReleaseRunner, spark: Any, say: Say) -> Iterator[Continuations]:
    """Releases' checkpoints continued by the pin, made on first use and kept for the session."""
    continued = Continuations(releases, spark, say)
    try:
        yield continued
    finally:
        continued.close()


@pytest.fixture(scope="session", autouse=True)
def compat_workloads_ahead(request: pytest.FixtureRequest) -> None:
    """In a session that will run the compatibility tests in this one process, the
    releases' workloads start in the background with its first test; those tests, last
    in the session, then find them done (the rest of the session mostly waits on
    processes of its own, so the two overlap). Under pytest-xdist the compatibility
    tests run first on one worker anyway."""
    if hasattr(request.config, "workerinput"):
        return
    wanted = set()
    for item in request.session.items:
        callspec = getattr(item, "callspec", None)
        if "releases" in getattr(item, "fixturenames", ()) and callspec is not None:
            wanted.add(callspec.params.get("release"))
    chosen = [release for release in UNDER_TEST if release in wanted]
    if chosen:
        request.getfixturevalue("releases").prefetch(chosen)
