"""What the daemon, the client and the Spark plugin share.

``errors`` (the root of every error), ``reasons`` (the stable, documented error
reasons clients read from ``google.rpc.ErrorInfo``), ``sparktypes`` (Spark SQL
types and decoded values), ``checkpoint`` (a streaming query's logs),
``zookeeper`` (the ZooKeeper layout, records and session rules) and ``alignment``
(the subject registry, the alignment protocol and its coordinator).
The core imports none of the packages that use it.
"""
