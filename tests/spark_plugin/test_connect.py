"""The listener through a Spark Connect session: reports arrive, lookups equal Spark's reader.

The query runs on a real local Spark Connect server (the one the pyspark wheel
ships, started by ``SparkSession.builder.remote``) in a process of its own, as a
Connect client application would; the daemon starts with no job and follows the
one the listener's first report names.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.fixtures.daemon import DaemonProcess
from tests.spark_plugin.connect_job import EPOCHS

pytestmark = [pytest.mark.spark, pytest.mark.timeout(600)]
ROOT = Path(__file__).resolve().parents[2]


def test_a_query_on_spark_connect_is_reported_and_served_as_its_reader_reads_it(
    tmp_path: Path, daemon_factory: Callable[..., DaemonProcess]
) -> None:
    daemon = daemon_factory({})
    work = tmp_path / "job"
    with (tmp_path / "connect.log").open("w") as log:
        # Output to a file: the Connect server's JVM may hold a pipe after the client exits.
        done = subprocess.run(
            [sys.executable, "-m", "tests.spark_plugin.connect_job", daemon.target, str(work)],
            cwd=ROOT,
            stdout=log,
            stderr=subprocess.STDOUT,
            timeout=480,
        )
    assert done.returncode == 0, (tmp_path / "connect.log").read_text()[-4000:]
    oracle = {int(e): rows for e, rows in json.loads((work / "oracle.json").read_text()).items()}
    daemon.wait_for_epoch("orders", EPOCHS - 1)  # followed on the listener's report alone
    with daemon.client() as client:
        (job,) = client.jobs()
        assert (job.job, job.checkpoint) == ("orders", str(work / "cp"))
        for epoch in range(EPOCHS):
            served = sorted(
                [lk.key.fields[0][1], *(value for _, value in lk.value.fields), lk.partition]
                for lk in client.scan("orders", epoch=epoch)
                if lk.value is not None
            )
            assert served == oracle[epoch], f"epoch {epoch}"
            assert served, f"epoch {epoch} is empty"
