"""A bare gRPC unary echo server (no protobuf work, no storage): the floor for any
Python gRPC lookup. Run as its own process, like the daemon; prints its port."""

from __future__ import annotations

import sys
from concurrent import futures

import grpc


def echo(request: bytes, context: grpc.ServicerContext) -> bytes:
    return request


def main() -> None:
    handler = grpc.method_handlers_generic_handler(
        "bench.Echo", {"Echo": grpc.unary_unary_rpc_method_handler(echo)}
    )
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=16))
    server.add_generic_rpc_handlers((handler,))
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    print(port, flush=True)
    sys.stdin.read()  # serve until the parent closes our stdin
    server.stop(0)


if __name__ == "__main__":
    main()
