"""Test-session set-up: UTC everywhere, one SparkSession, real daemons as subprocesses."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from epochstate.devtools.python_workers import worker_python

# PySpark hands timestamps back as naive local datetimes: make local time UTC before
# the JVM starts. Python workers must run the venv's interpreter.
os.environ["TZ"] = "UTC"
time.tzset()
os.environ["PYSPARK_PYTHON"] = worker_python()  # this interpreter (epochstate.devtools.python_workers)
os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
# gcsfs decides at import whether to ask GCS's Storage Control gRPC API about each
# bucket; the GCS emulator serves only the JSON API (see devtools/stores/gcs.py).
os.environ.setdefault("GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT", "false")

from tests.fixtures.daemon import DaemonProcess  # noqa: E402
from tests.fixtures.spark import local_test_session  # noqa: E402

pytest_plugins = [
    "tests.fixtures.zookeeper",
    "tests.fixtures.kafka",
    "tests.fixtures.s3",
    "tests.fixtures.clouds",
    "tests.fixtures.repartition",
    "tests.compat.fixtures",
]


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    """The test session's one local[2] SparkSession."""
    session = local_test_session("epochstate-tests")
    yield session
    session.stop()


@pytest.fixture
def daemon_factory(tmp_path: Path) -> Iterator[Callable[..., DaemonProcess]]:
    """Start real daemon processes; all are stopped at the end of the test."""
    started: list[DaemonProcess] = []

    def make(
        jobs: dict[str, str], *, name: str = "daemon", wait: bool = True, **kwargs: Any
    ) -> DaemonProcess:
        """``wait=False``: return while the daemon starts; its first use waits for it
        (``DaemonProcess.start``), so a test's Spark batches run meanwhile."""
        process = DaemonProcess(tmp_path / name, jobs, **kwargs)
        started.append(process)
        return process.start(wait=wait)

    yield make
    for process in started:  # all shut down at once, not one after the other
        process.terminate()
    for process in started:
        process.stop()


# Fixtures that start a process of their own (a JVM, a server, the daemon): a test that
# uses one is not in-process. ``make test-fast`` runs the others (``-m "not process"``).
PROCESS_FIXTURES = frozenset(
    {
        "spark",
        "daemon_factory",
        "zookeeper_server",
        "private_zookeeper_server",
        "zk_connect",
        "kafka_broker",
        "s3_server",
        "gcs_server",
        "azure_server",
        "repartitioned",
    }
)
# Folders whose every test drives real processes (daemons, JVMs, clusters of them).
PROCESS_FOLDERS = ("compat", "deploy", "e2e", "group", "fuzz")


# Session-scoped Spark workloads (each a streaming query run once per test process) that
# tests of several files read.
WORKLOAD_FIXTURES = frozenset(
    {"repartitioned", "checkpoints", "rocksdb_checkpoints", "rocksdb_checkpoint", "releases", "continuations"}
)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    root = Path(__file__).parent
    for item in items:
        folder = Path(item.path).relative_to(root).parts[0]
        if folder in PROCESS_FOLDERS or PROCESS_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.process)
    _group_by_workload(items, root)


def _group_by_workload(items: list[pytest.Item], root: Path) -> None:
    """Mark each test with the pytest-xdist group its file runs in (``make pytest`` runs
    ``--dist loadgroup``): its file's, or, for files that read a shared workload, one group
    for all the files that read it, so that one worker makes the workload once and every
    module fixture of a file is made once too."""
    files: dict[str, str] = {}  # file -> the file that names its group

    def group_of(file: str) -> str:
        while files.setdefault(file, file) != file:
            file = files[file]
        return file

    by_workload: dict[str, str] = {}
    for item in items:
        file = str(Path(item.path).relative_to(root))
        group_of(file)
        for workload in sorted(WORKLOAD_FIXTURES & set(getattr(item, "fixturenames", ()))):
            first = by_workload.setdefault(workload, file)
            files[group_of(file)] = group_of(first)
    for item in items:
        item.add_marker(pytest.mark.xdist_group(group_of(str(Path(item.path).relative_to(root)))))
