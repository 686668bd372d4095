"""A bare gRPC unary echo server (no protobuf work, no storage): the floor for any
Python gRPC lookup. Run as its own process, like the daemon; prints its TCP port
and serves until its standard input closes. With ``--unix PATH`` it also serves on
a Unix socket at PATH, as the daemon does.

    python bench/echo_server.py            # thread pool, the daemon's server model
    python bench/echo_server.py --asyncio  # grpc.aio, one event loop
    python bench/echo_server.py --unix /tmp/echo.sock
    python bench/echo_server.py --tls-cert s.pem --tls-key s.key --tls-client-ca ca.pem  # (m)TLS on TCP
    python bench/echo_server.py --processes 2  # two processes sharing the port (SO_REUSEPORT)
"""

from __future__ import annotations

import argparse
import asyncio
import subprocess
import sys
from collections.abc import Callable
from concurrent import futures
from typing import cast

import grpc


def echo(request: bytes, context: grpc.ServicerContext) -> bytes:
    return request


async def echo_async(request: bytes, context: grpc.aio.ServicerContext[bytes, bytes]) -> bytes:
    return request


def _handler(behavior: object) -> grpc.GenericRpcHandler[bytes, bytes]:
    method = grpc.unary_unary_rpc_method_handler(behavior)  # type: ignore[arg-type]
    return grpc.method_handlers_generic_handler("bench.Echo", {"Echo": method})


def _credentials(args: argparse.Namespace) -> grpc.ServerCertificateConfiguration | None:
    if not args.tls_cert:
        return None
    with open(args.tls_cert, "rb") as cert, open(args.tls_key, "rb") as key:
        pair = (key.read(), cert.read())
    roots = None
    if args.tls_client_ca:
        with open(args.tls_client_ca, "rb") as ca:
            roots = ca.read()
    return grpc.ssl_server_certificate_configuration([pair], root_certificates=roots)


def _tcp_port(server: grpc.Server | grpc.aio.Server, args: argparse.Namespace) -> int:
    """TCP on loopback: TLS as the daemon serves it (its dynamic credentials, mTLS with a
    client CA) when a certificate is given, plaintext otherwise."""
    configuration = _credentials(args)
    if configuration is None:
        return server.add_insecure_port("127.0.0.1:0")
    # Never a new configuration (None); grpc's stubs do not allow for that answer.
    unchanged = cast(Callable[[], grpc.ServerCertificateConfiguration], lambda: None)
    credentials = grpc.dynamic_ssl_server_credentials(
        configuration, unchanged, require_client_authentication=bool(args.tls_client_ca)
    )
    return server.add_secure_port("127.0.0.1:0", credentials)


def _others(port: int, args: argparse.Namespace) -> list[subprocess.Popen[bytes]]:
    """The other processes: started, not forked (gRPC's state does not survive a fork),
    each its own server of the same kind on the same port, as the daemon's serving
    processes are; returned once each serves."""
    kind = ["--asyncio"] if args.asyncio else []
    others = [
        subprocess.Popen(
            [sys.executable, __file__, "--port", str(port), "--workers", str(args.workers), *kind],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
        )
        for _ in range(args.processes - 1)
    ]
    for other in others:
        assert other.stdout is not None
        other.stdout.readline()
    return others


def _stop(others: list[subprocess.Popen[bytes]]) -> None:
    for other in others:
        assert other.stdin is not None
        other.stdin.close()
        other.wait()


def _options(args: argparse.Namespace) -> list[tuple[str, int]]:
    return [("grpc.so_reuseport", 1 if args.processes > 1 or args.port else 0)]


def serve_threads(unix: str | None, args: argparse.Namespace) -> None:
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=args.workers), options=_options(args))
    server.add_generic_rpc_handlers((_handler(echo),))
    port = server.add_insecure_port(f"127.0.0.1:{args.port}") if args.port else _tcp_port(server, args)
    if unix:
        server.add_insecure_port(f"unix://{unix}")
    server.start()
    others = _others(port, args)
    print(port, flush=True)
    sys.stdin.read()
    _stop(others)
    server.stop(0)


async def serve_asyncio(unix: str | None, args: argparse.Namespace) -> None:
    server = grpc.aio.server(options=_options(args))
    server.add_generic_rpc_handlers((_handler(echo_async),))
    port = server.add_insecure_port(f"127.0.0.1:{args.port}") if args.port else _tcp_port(server, args)
    if unix:
        server.add_insecure_port(f"unix://{unix}")
    await server.start()
    others = _others(port, args)
    print(port, flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
    _stop(others)
    await server.stop(0)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--asyncio", action="store_true", help="serve with grpc.aio")
    parser.add_argument("--unix", help="also serve on a Unix socket at this absolute path")
    parser.add_argument("--tls-cert", help="serve TCP with TLS: this certificate (PEM)")
    parser.add_argument("--tls-key", help="the certificate's key (PEM)")
    parser.add_argument("--tls-client-ca", help="require client certificates this CA signed (mTLS)")
    parser.add_argument("--processes", type=int, default=1, help="processes sharing the TCP port")
    parser.add_argument("--port", type=int, default=0, help="join the processes serving this port")
    parser.add_argument("--workers", type=int, default=16, help="threads of each process's server pool")
    args = parser.parse_args()
    if args.asyncio:
        asyncio.run(serve_asyncio(args.unix, args))
    else:
        serve_threads(args.unix, args)
