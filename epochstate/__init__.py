"""epochstate: epoch-pinned, repeatable lookups into the state of Spark streaming jobs.

The distribution's packages live in the repository's top-level folders and are
reached through this namespace: ``epochstate.daemon`` (``daemon/``),
``epochstate.client`` (``client/``), ``epochstate.spark_plugin``
(``spark_plugin/``) and ``epochstate.v1`` (generated gRPC code in ``proto/``).
"""

__version__ = "0.1.0"
