"""Alignment control on ZooKeeper alone: the subject registry, commands and reports, the coordinator.

The aligned Kafka source and sink (``epochstate.spark_plugin.alignment``), the
``epochstate align`` CLI and the daemon's ``AlignmentAdmin`` gRPC service all
use these modules; nothing here imports Spark or Kafka, so the daemon can.
Modules: ``layout`` (znode paths), ``records`` (subject epochs and source
records), ``commands`` (commands and reports), ``subjects`` (the registry),
``boundaries`` (where epochs start), ``coordinator``, ``retention``, ``errors``.
"""
