"""A client's connections to one target take turns call by call (after a method's first
calls, which stay on one), each a TCP connection of its own: against a real gRPC server
on loopback that answers each call with the caller's address."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent import futures

import grpc
import pytest

from epochstate.client.channels import WARM_CALLS, ChannelPool, connections_for
from epochstate.client.tls import TlsOptions, open_channel

PEER = "/test.Peer/Peer"


@pytest.fixture
def peer_server() -> Iterator[str]:
    """A server whose one method answers the caller's address (one per connection)."""
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    answer = grpc.unary_unary_rpc_method_handler(lambda request, context: context.peer().encode())
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler("test.Peer", {"Peer": answer}),))
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    yield f"127.0.0.1:{port}"
    server.stop(0)


def test_calls_take_turns_over_connections_after_the_first_ones(peer_server: str) -> None:
    with open_channel(peer_server, TlsOptions(), (), connections=4) as pool:
        assert isinstance(pool, ChannelPool) and len(pool.channels) == 4
        call = pool.unary_unary(PEER, None, None)
        first = {call(b"", timeout=10) for _ in range(WARM_CALLS)}
        assert len(first) == 1  # a short-lived client opens one connection
        turns = [call(b"", timeout=10) for _ in range(8)]
        assert len(set(turns)) == 4 and turns[:4] == turns[4:]


def test_how_many_connections() -> None:
    assert connections_for("daemon:7070", None) == 4
    assert connections_for("unix:///run/epochstate.sock", None) == 1
    assert connections_for("daemon:7070", 2) == 2
    with pytest.raises(ValueError, match="at least one connection"):
        connections_for("daemon:7070", 0)
    with open_channel("daemon:7070", TlsOptions(), (), connections=1) as one:
        assert not isinstance(one, ChannelPool)
