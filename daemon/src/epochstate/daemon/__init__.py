"""The epochstate daemon: follows Spark checkpoints and serves epoch-pinned lookups.

Layers, each knowing only the one below it: ``sources`` (reading Spark
checkpoints), ``store`` (the local multi-version RocksDB), ``registry``
(ZooKeeper), ``server`` (gRPC). ``ingest`` connects them.
"""
