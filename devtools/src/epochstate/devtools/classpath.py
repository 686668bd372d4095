"""Where the JVM and the ZooKeeper jars come from.

The server jars are the ones the pyspark wheel ships in ``pyspark/jars``, so no
separate ZooKeeper download is needed. pyspark is located without importing it
(importing pyspark takes seconds).
"""

from __future__ import annotations

import importlib.util
import os
import shutil
from pathlib import Path

from epochstate.devtools.errors import JavaNotFound, ZooKeeperJarsNotFound

CLASSPATH_ENV = "EPOCHSTATE_ZOOKEEPER_CLASSPATH"
CACHE_ENV = "EPOCHSTATE_JVM_CACHE"

# ZooKeeper's runtime dependencies for a standalone NIO server without the admin
# server (no Jetty, Jackson or Netty). Naming them instead of the whole directory
# (about 280 jars) halves the JVM's start time; if any is missing (another pyspark
# version) the whole directory is used.
_SERVER_JARS = (
    "zookeeper-[0-9]*.jar",
    "zookeeper-jute-*.jar",
    "audience-annotations-*.jar",
    "commons-io-*.jar",
    "metrics-core-*.jar",
    "snappy-java-*.jar",
    "slf4j-api-*.jar",
    "log4j-slf4j2-impl-*.jar",
    "log4j-api-*.jar",
    "log4j-core-*.jar",
)


def find_java(java: str | None = None) -> str:
    """The java executable: ``java`` if given, else ``$JAVA_HOME/bin/java``, else PATH.

    Raises:
        JavaNotFound: none of these exists.
    """
    if java is not None:
        found = shutil.which(java)
        if found is None:
            raise JavaNotFound(f"java executable {java!r} not found")
        return found
    java_home = os.environ.get("JAVA_HOME")
    if java_home:
        candidate = Path(java_home, "bin", "java")
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    found = shutil.which("java")
    if found is None:
        raise JavaNotFound(
            "no java on PATH and JAVA_HOME is not set: the embedded ZooKeeper needs a "
            "Java 17+ runtime (e.g. apt-get install openjdk-17-jre-headless)"
        )
    return found


def pyspark_jars_dir() -> Path | None:
    """``<pyspark>/jars`` of the installed pyspark, found without importing it."""
    spec = importlib.util.find_spec("pyspark")
    if spec is None or not spec.submodule_search_locations:
        return None
    for location in spec.submodule_search_locations:
        jars = Path(location, "jars")
        if jars.is_dir():
            return jars
    return None


def zookeeper_classpath(classpath: str | None = None) -> str:
    """The JVM classpath holding ZooKeeper's server and its logging.

    Order: the ``classpath`` argument, the EPOCHSTATE_ZOOKEEPER_CLASSPATH environment
    variable, the jars of the installed pyspark, ``$SPARK_HOME/jars``.

    Raises:
        ZooKeeperJarsNotFound: no source has a zookeeper jar.
    """
    if classpath:
        return classpath
    from_env = os.environ.get(CLASSPATH_ENV)
    if from_env:
        return from_env
    candidates = [pyspark_jars_dir()]
    spark_home = os.environ.get("SPARK_HOME")
    if spark_home:
        candidates.append(Path(spark_home, "jars"))
    for jars in candidates:
        if jars is not None and any(jars.glob(_SERVER_JARS[0])):
            return _classpath_in(jars)
    raise ZooKeeperJarsNotFound(
        "no zookeeper jar found: install pyspark (pip install 'epochstate[spark]'), "
        f"set SPARK_HOME, or set {CLASSPATH_ENV} to a classpath with ZooKeeper 3.5+"
    )


def _classpath_in(jars: Path) -> str:
    selected: list[str] = []
    for pattern in _SERVER_JARS:
        matches = sorted(jars.glob(pattern))
        if not matches:
            return str(jars / "*")
        selected.append(str(matches[-1]))
    return os.pathsep.join(selected)


def cache_dir() -> Path:
    """Where what is built once per Java and pyspark goes (the class archive, the local file
    system's jar): ``$EPOCHSTATE_JVM_CACHE``, else ``$XDG_CACHE_HOME/epochstate``, else
    ``~/.cache/epochstate``."""
    configured = os.environ.get(CACHE_ENV)
    if configured:
        return Path(configured)
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache", "epochstate")


def keep_only(path: Path, pattern: str) -> None:
    """Remove the files matching ``pattern`` beside ``path``, except ``path``: what was built
    for another Java, pyspark or source."""
    for stale in path.parent.glob(pattern):
        if stale != path:
            stale.unlink(missing_ok=True)
