"""The root of every error the daemon raises on purpose.

Each layer subclasses it once; the gRPC boundary maps the subclasses to status
codes in one table (``epochstate.daemon.server.status``).
"""


class EpochStateError(Exception):
    """Root exception of the daemon."""
