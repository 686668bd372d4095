"""epochstate: epoch-pinned, repeatable lookups into the state of Spark streaming jobs.

The distribution's packages live in the repository's top-level folders, mapped into
this namespace by ``pyproject.toml`` (``[tool.setuptools.package-dir]``):
``epochstate.core`` (``core/``), ``epochstate.client`` (``client/``),
``epochstate.cli`` (``cli/``), ``epochstate.daemon`` (``daemon/``),
``epochstate.spark_plugin`` (``spark_plugin/``), ``epochstate.devtools``
(``devtools/``) and ``epochstate.v1`` (generated gRPC code in ``proto/``).
"""

__version__ = "0.1.0"
