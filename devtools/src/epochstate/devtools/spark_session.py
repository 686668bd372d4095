"""A small local-mode SparkSession for the demos and job runners (not for production jobs).

Spark reads its settings once per JVM, so the first call in a process decides them
(and, with ``logs``, where the JVM's output goes).
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from epochstate.devtools.jvm_options import small_jvm_conf
from epochstate.devtools.python_workers import worker_python

_QUIET = {
    "spark.sql.shuffle.partitions": "2",
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    # A Python worker connecting back to the JVM on a busy machine: 15 s by default.
    "spark.python.authenticate.socketTimeout": "120s",
}

# Spark's log4j log in one file. WARN like Spark's own default profile: its INFO
# lines (every task of every batch) would bury the warnings.
_LOG4J2_PROPERTIES = """\
status = warn
appender.file.type = File
appender.file.name = file
appender.file.fileName = {path}
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = %d{{yy/MM/dd HH:mm:ss}} %p %c{{1}}: %m%n%ex
rootLogger.level = warn
rootLogger.appenderRef.file.ref = file
"""


def local_session(
    app: str,
    *,
    cores: int = 2,
    conf: Mapping[str, str] | None = None,
    log_level: str = "ERROR",
    log4j_file: Path | None = None,
    console_file: Path | None = None,
) -> Any:
    """A ``local[cores]`` session named ``app``: two shuffle partitions, no UI or progress
    bars, Python workers on this interpreter (unless PYSPARK_PYTHON says otherwise), a
    JVM tuned to start small (:mod:`epochstate.devtools.jvm_options`); ``conf`` adds or
    overrides settings (its driver Java options come after the small JVM's).

    Without files, Spark logs to the terminal at ``log_level``. With ``log4j_file``,
    Spark's log4j log goes there (WARN and above) instead; with ``console_file``, so
    does everything the JVM and its Python workers print on stdout and stderr. Both
    apply only when this call starts the JVM.
    """
    os.environ.setdefault("PYSPARK_PYTHON", worker_python())
    from pyspark import SparkConf, SparkContext
    from pyspark.sql import SparkSession

    settings = {**_QUIET, **(conf or {})}
    java_options = [settings.get("spark.driver.extraJavaOptions")]
    if log4j_file is not None:
        java_options.append(_log4j_option(log4j_file))
    settings.update(small_jvm_conf(" ".join(filter(None, java_options))))
    spark_conf = SparkConf().setMaster(f"local[{cores}]").setAppName(app).setAll(list(settings.items()))
    # A JVM this process started already keeps its output where it goes.
    if console_file is not None and SparkContext._active_spark_context is None:
        _start_context(spark_conf, console_file)
    spark = SparkSession.builder.config(conf=spark_conf).getOrCreate()
    if log4j_file is None:
        spark.sparkContext.setLogLevel(log_level)
    return spark


def _log4j_option(log_file: Path) -> str:
    """The JVM option that points log4j2 at a configuration writing to ``log_file``."""
    log_file.parent.mkdir(parents=True, exist_ok=True)
    config = log_file.with_name(f"{log_file.stem}-log4j2.properties")
    config.write_text(_LOG4J2_PROPERTIES.format(path=log_file))
    # Quoted: Spark's launcher splits the option string the way a shell would.
    return f'-Dlog4j2.configurationFile="{config}"'


def _start_context(spark_conf: Any, console_file: Path) -> None:
    """Start the JVM with its stdout and stderr on ``console_file`` (its Python workers inherit them)."""
    from pyspark import SparkContext
    from pyspark.java_gateway import launch_gateway

    with console_file.open("ab") as console:
        # pyspark's documented way to capture the JVM's output ("popen_kwargs").
        gateway = launch_gateway(  # type: ignore[no-untyped-call]
            spark_conf, popen_kwargs={"stdout": console, "stderr": subprocess.STDOUT}
        )
    SparkContext(conf=spark_conf, gateway=gateway)
