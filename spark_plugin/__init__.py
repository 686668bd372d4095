"""What runs inside Spark: the listener that reports committed epochs to the daemon."""

from epochstate.spark_plugin.listener import EpochReporter, attach

__all__ = ["EpochReporter", "attach"]
