"""A small local-mode SparkSession for the demos and job runners (not for production jobs).

Spark reads its settings once per JVM, so the first call in a process decides them.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from typing import Any

_QUIET = {
    "spark.sql.shuffle.partitions": "2",
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
}


def local_session(
    app: str, *, cores: int = 2, conf: Mapping[str, str] | None = None, log_level: str = "ERROR"
) -> Any:
    """A ``local[cores]`` session named ``app``: two shuffle partitions, no UI or progress
    bars, Python workers on this interpreter (unless PYSPARK_PYTHON says otherwise);
    ``conf`` adds or overrides settings."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.master(f"local[{cores}]").appName(app)
    for key, value in {**_QUIET, **(conf or {})}.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel(log_level)
    return spark
