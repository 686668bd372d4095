"""A bare gRPC unary echo server (no protobuf work, no storage): the floor for any
Python gRPC lookup. Run as its own process, like the daemon; prints its TCP port
and serves until its standard input closes. With ``--unix PATH`` it also serves on
a Unix socket at PATH, as the daemon does.

    python bench/echo_server.py            # thread pool, the daemon's server model
    python bench/echo_server.py --asyncio  # grpc.aio, one event loop
    python bench/echo_server.py --unix /tmp/echo.sock
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from concurrent import futures

import grpc


def echo(request: bytes, context: grpc.ServicerContext) -> bytes:
    return request


async def echo_async(request: bytes, context: grpc.aio.ServicerContext[bytes, bytes]) -> bytes:
    return request


def _handler(behavior: object) -> grpc.GenericRpcHandler[bytes, bytes]:
    method = grpc.unary_unary_rpc_method_handler(behavior)  # type: ignore[arg-type]
    return grpc.method_handlers_generic_handler("bench.Echo", {"Echo": method})


def serve_threads(unix: str | None) -> None:
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=16))
    server.add_generic_rpc_handlers((_handler(echo),))
    port = server.add_insecure_port("127.0.0.1:0")
    if unix:
        server.add_insecure_port(f"unix://{unix}")
    server.start()
    print(port, flush=True)
    sys.stdin.read()
    server.stop(0)


async def serve_asyncio(unix: str | None) -> None:
    server = grpc.aio.server()
    server.add_generic_rpc_handlers((_handler(echo_async),))
    port = server.add_insecure_port("127.0.0.1:0")
    if unix:
        server.add_insecure_port(f"unix://{unix}")
    await server.start()
    print(port, flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
    await server.stop(0)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--asyncio", action="store_true", help="serve with grpc.aio")
    parser.add_argument("--unix", help="also serve on a Unix socket at this absolute path")
    args = parser.parse_args()
    if args.asyncio:
        asyncio.run(serve_asyncio(args.unix))
    else:
        serve_threads(args.unix)
