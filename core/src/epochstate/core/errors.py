"""The root of every error epochstate raises on purpose: daemon, client, plugin and tools.

Each package subclasses it once and adds one-line subclasses per kind of failure.
An error that can end a gRPC call declares its stable reason
(:mod:`epochstate.core.reasons`) as the class attribute ``reason``; the daemon
sends that reason, never the class name, so classes may be renamed or moved
freely. The daemon maps classes to status codes in one table
(``epochstate.daemon.server.status``); the client maps reasons back to its own
subclasses of this root (``epochstate.client.errors``).
"""

from __future__ import annotations

from collections.abc import Mapping

from epochstate.core import reasons


class EpochStateError(Exception):
    """Root of every epochstate error.

    ``reason`` is the stable reason the error travels under across the gRPC
    boundary (:data:`epochstate.core.reasons.INTERNAL` unless a subclass names a
    more precise one). ``metadata`` holds details for ``ErrorInfo.metadata``
    (lowerCamelCase keys, string values), empty unless the raiser gave some.
    """

    reason: str = reasons.INTERNAL

    def __init__(self, *args: object, metadata: Mapping[str, str] | None = None) -> None:
        super().__init__(*args)
        self.metadata: dict[str, str] = dict(metadata or {})


class BadRequest(EpochStateError):
    """A request that is malformed apart from its key and selector (limits, tokens,
    names, a checkpoint that cannot be followed). Raised by any daemon layer that
    checks a request's field; sent as BAD_REQUEST (INVALID_ARGUMENT)."""

    reason = reasons.BAD_REQUEST
