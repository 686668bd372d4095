"""The proxy that cuts a daemon off ZooKeeper in the group tests: after :meth:`CutProxy.cut`
nothing is forwarded any more, not even a connection that was being accepted during the cut
(a client reconnecting right then)."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from contextlib import suppress

import pytest

from tests.group.cut_proxy import CutProxy


class _CutWhileConnecting(CutProxy):
    """Cuts between accepting a client and connecting it upstream: the moment a client that
    reconnects can hit, which a loaded machine can stretch to any length."""

    def _connect_upstream(self) -> socket.socket:
        self.cut()
        return super()._connect_upstream()


@pytest.fixture
def echo() -> Iterator[tuple[str, int]]:
    """A loopback server that sends back what it receives."""
    listener = socket.create_server(("127.0.0.1", 0))

    def serve(connection: socket.socket) -> None:
        with connection, suppress(OSError):
            while data := connection.recv(4096):
                connection.sendall(data)

    def accept() -> None:
        with suppress(OSError):
            while True:
                threading.Thread(target=serve, args=(listener.accept()[0],), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    yield listener.getsockname()[:2]
    listener.close()


def _echoed(proxy: CutProxy) -> bytes:
    """What comes back through ``proxy`` for one byte sent: b"" once the proxy closed it."""
    with socket.create_connection(("127.0.0.1", proxy.port), timeout=30) as sock:
        try:
            sock.sendall(b"x")
            return sock.recv(1)
        except OSError:  # reset by the proxy
            return b""


def _closed(sock: socket.socket) -> bool:
    """Whether the other end closed ``sock`` (or reset it)."""
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True


def test_a_cut_closes_the_connections_forwarded(echo: tuple[str, int]) -> None:
    proxy = CutProxy(*echo)
    try:
        with socket.create_connection(("127.0.0.1", proxy.port), timeout=30) as sock:
            sock.sendall(b"x")
            assert sock.recv(1) == b"x"
            proxy.cut()
            with suppress(OSError):
                sock.sendall(b"y")
            assert _closed(sock)
        assert _echoed(proxy) == b""  # and refuses new ones
        proxy.restore()
        assert _echoed(proxy) == b"x"
    finally:
        proxy.close()


def test_a_connection_accepted_during_a_cut_is_not_forwarded(echo: tuple[str, int]) -> None:
    proxy = _CutWhileConnecting(*echo)
    try:
        assert _echoed(proxy) == b""
    finally:
        proxy.close()
