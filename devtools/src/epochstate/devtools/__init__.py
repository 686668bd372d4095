"""Development and demo tools: real servers as child processes (ZooKeeper, a
Kafka-protocol broker, a local daemon), a local-mode SparkSession and the demos.

Not for production: nothing in ``epochstate.daemon``, ``epochstate.client`` or
``epochstate.spark_plugin`` imports this package.
"""
