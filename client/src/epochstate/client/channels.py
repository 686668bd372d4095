"""Several connections to one daemon, calls taken in turn: how a client reaches every
serving process.

A daemon serves its TCP port from several processes (``serve.processes``), and the
kernel spreads *connections*, not calls, over them (``SO_REUSEPORT`` hashes each
connection's addresses). One channel is one connection, so a client on one channel
would keep every call on one process. :class:`ChannelPool` opens ``connections``
channels to the same target, each with a subchannel pool of its own (gRPC would
otherwise share one connection between channels with the same arguments), and sends
each call on the next one in turn. Which process each connection lands on is the
kernel's choice: with ``n`` connections and two processes, all of them land on one
with odds of 1 in 2^(n-1).

A short-lived client (a command, a lookup per batch) should not pay a connection
(and a TLS handshake, on both sides) per call: a method's first
:data:`WARM_CALLS` calls all go on the first connection, and only a client that
keeps calling opens the others, each at its first turn.

Over a Unix socket (one process serves it) and in-process (``local://``) one
channel is all there is to use.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from typing import Any

import grpc

# Enough connections that a daemon of up to four processes gets calls on most of them
# (two processes: both with odds 7 in 8), few enough to cost a handful of sockets.
DEFAULT_CONNECTIONS = 4
LOCAL_SUBCHANNEL_POOL = ("grpc.use_local_subchannel_pool", 1)
# Calls of a method on the first connection before the others take turns.
WARM_CALLS = 16


def connections_for(target: str, connections: int | None) -> int:
    """How many connections a client of ``target`` opens: ``connections`` when given,
    else :data:`DEFAULT_CONNECTIONS` for TCP and 1 for a Unix socket."""
    if connections is not None:
        if connections < 1:
            raise ValueError(f"a client needs at least one connection, not {connections}")
        return connections
    return 1 if target.startswith("unix:") else DEFAULT_CONNECTIONS


class _InTurn:
    """A multi-callable over one per channel, each call on the next one.

    The turn is an ``itertools.count``: ``next`` on it is one C call, so threads
    sharing the pool never get the same number (the interpreter runs no other
    thread within it); a skewed turn would only unbalance, never misroute, a call.
    """

    def __init__(self, callables: Sequence[Any]) -> None:
        self._callables = tuple(callables)
        self._turn = itertools.count()

    def _next(self) -> Any:
        turn = next(self._turn)
        return self._callables[0 if turn < WARM_CALLS else turn % len(self._callables)]

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._next()(*args, **kwargs)

    def with_call(self, *args: Any, **kwargs: Any) -> Any:
        return self._next().with_call(*args, **kwargs)

    def future(self, *args: Any, **kwargs: Any) -> Any:
        return self._next().future(*args, **kwargs)


class ChannelPool(grpc.Channel):
    """``channels`` to one target used in turn, call by call; closing it closes them all."""

    def __init__(self, channels: Sequence[grpc.Channel]) -> None:
        if not channels:
            raise ValueError("a channel pool needs a channel")
        self.channels = tuple(channels)

    def _in_turn(self, make: Callable[[grpc.Channel], Any]) -> Any:
        if len(self.channels) == 1:
            return make(self.channels[0])
        return _InTurn([make(channel) for channel in self.channels])

    def unary_unary(self, method: str, *args: Any, **kwargs: Any) -> Any:
        return self._in_turn(lambda channel: channel.unary_unary(method, *args, **kwargs))

    def unary_stream(self, method: str, *args: Any, **kwargs: Any) -> Any:
        return self._in_turn(lambda channel: channel.unary_stream(method, *args, **kwargs))

    def stream_unary(self, method: str, *args: Any, **kwargs: Any) -> Any:
        return self._in_turn(lambda channel: channel.stream_unary(method, *args, **kwargs))

    def stream_stream(self, method: str, *args: Any, **kwargs: Any) -> Any:
        return self._in_turn(lambda channel: channel.stream_stream(method, *args, **kwargs))

    def subscribe(self, callback: Any, try_to_connect: bool = False) -> None:
        for channel in self.channels:
            channel.subscribe(callback, try_to_connect)

    def unsubscribe(self, callback: Any) -> None:
        for channel in self.channels:
            channel.unsubscribe(callback)

    def close(self) -> None:
        for channel in self.channels:
            channel.close()

    def __enter__(self) -> ChannelPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
