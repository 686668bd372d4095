"""Errors of the embedded servers (development and tests)."""

from epochstate.core.errors import EpochStateError


class EmbeddedServerError(EpochStateError):
    """Root of the embedded-server errors."""


class JavaNotFound(EmbeddedServerError):
    """No ``java`` executable: install a JRE 17+ or set JAVA_HOME."""


class ZooKeeperJarsNotFound(EmbeddedServerError):
    """No ZooKeeper jars: install pyspark or set EPOCHSTATE_ZOOKEEPER_CLASSPATH."""


class ZooKeeperStartFailed(EmbeddedServerError):
    pass
