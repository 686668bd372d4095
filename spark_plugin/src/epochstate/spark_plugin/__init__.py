"""What runs inside Spark: the listener that reports committed epochs to the daemon,
the aligned Kafka source and sink (``alignment``) and cross-job lookups pinned to
aligned epochs (``lookup.AlignedLookup``).

The listener's names load on first use: the Python workers of the aligned source and
sink import this package too, and need neither the listener nor the gRPC client under it.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from epochstate.spark_plugin.listener import EpochReporter, Placement, attach

__all__ = ["EpochReporter", "Placement", "attach"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        return getattr(importlib.import_module("epochstate.spark_plugin.listener"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
