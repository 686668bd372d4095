"""Spark's Python workers run this interpreter and import pyspark from site-packages
(``epochstate.devtools.python_workers``), every other ``PYTHONPATH`` entry kept."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from epochstate.devtools.python_workers import worker_python


def test_the_launcher_drops_only_pysparks_zips_and_runs_this_interpreter(tmp_path: Path) -> None:
    launcher = worker_python()
    assert launcher != sys.executable, "pyspark is pip-installed here: the launcher is written"
    lib = "/opt/x/site-packages/pyspark/python/lib"
    entries = [
        "/a b",
        f"{lib}/pyspark.zip",
        "/c",
        f"{lib}/py4j-0.10.9.9-src.zip",
        "/spark/python/lib/pyspark.zip",
    ]
    script = "import os, sys; print(sys.executable); print(os.environ.get('PYTHONPATH', '<unset>'))"
    for path, expected in [
        (":".join(entries), "/a b:/c:/spark/python/lib/pyspark.zip"),
        (f"{lib}/pyspark.zip", "<unset>"),
    ]:
        done = subprocess.run(
            [launcher, "-c", script],
            env={**os.environ, "PYTHONPATH": path},
            capture_output=True,
            text=True,
            check=True,
        )
        assert done.stdout.splitlines() == [sys.executable, expected]


@pytest.mark.spark
def test_the_sessions_workers_import_pyspark_from_site_packages(spark: Any) -> None:
    def where(rows: Any) -> Any:
        import pyspark

        yield pyspark.__file__

    import pyspark

    assert spark.sparkContext.parallelize([1], 1).mapPartitions(where).collect() == [pyspark.__file__]
    assert ".zip" not in pyspark.__file__
