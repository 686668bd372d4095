"""What runs inside Spark: the listener that reports committed epochs to the daemon,
the aligned Kafka source and sink (``alignment``) and cross-job lookups pinned to
aligned epochs (``lookup.AlignedLookup``)."""

from epochstate.spark_plugin.listener import EpochReporter, Placement, attach

__all__ = ["EpochReporter", "Placement", "attach"]
