"""The compatibility suite's fixtures: each Spark release's workload, run once per test
session in that release's own interpreter (see ``runner``), and a way to print
progress past pytest's capture (a cold venv downloads for minutes)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from epochstate.devtools.zookeeper import EmbeddedZooKeeper
from tests.compat.continuation import Continuations
from tests.compat.releases import UNDER_TEST
from tests.compat.runner import ReleaseRunner, Say, release_path
from tests.compat.venvs import warm_up
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
    """Each release's workload run, made on first use and kept for the session."""
    base = tmp_path_factory.mktemp("compat")
    yield ReleaseRunner(
        base / "runs", release_path(base / "path"), spark, zookeeper_server, kafka_broker, say
    )


@pytest.fixture(scope="session")
def continuations(releases: ReleaseRunner, spark: Any, say: Say) -> Iterator[Continuations]:
    """Releases' checkpoints continued by the pin, made on first use and kept for the session."""
    continued = Continuations(releases, spark, say)
    try:
        yield continued
    finally:
        continued.close()


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The compatibility tests' venvs are made (when missing) in the background from the
    start. In one process the tests run last, so the rest of the session hides the
    downloads; in several (pytest-xdist, whole files to a worker), they run first: their
    file is the longest, and one worker works through it while the others take the rest."""
    here = Path(__file__).parent
    compat = [item for item in items if here in item.path.parents]
    if compat:
        rest = [item for item in items if here not in item.path.parents]
        items[:] = compat + rest if hasattr(config, "workerinput") else rest + compat
        warm_up(UNDER_TEST)
