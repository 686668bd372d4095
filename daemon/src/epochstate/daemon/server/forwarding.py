"""Calls a serving process hands to the daemon's main process, unchanged.

A serving process (:mod:`epochstate.daemon.server.serving_process`) answers reads
from its own secondary of the store. Every other call (reports, following a job,
the admin services, routing, health, reflection, and any method it does not serve
itself) goes to the main process over a Unix socket in a directory only the
daemon's user can enter, as bytes: request, metadata, deadline, and back the
response or the status with its details (``ErrorInfo`` reasons travel untouched).

The caller's identity is checked here, before forwarding (the serving process
terminated TLS and holds the caller's certificate); the main process's internal
socket serves the same methods without a check of its own.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import grpc
from google.protobuf.descriptor import FileDescriptor
from grpc_health.v1 import health_pb2
from grpc_reflection.v1alpha import reflection_pb2

from epochstate.daemon.server import call_pool
from epochstate.daemon.server.handlers import Guard
from epochstate.daemon.server.security.gate import ROLES_OF
from epochstate.v1 import epochstate_pb2 as pb

_FILES: tuple[FileDescriptor, ...] = (pb.DESCRIPTOR, health_pb2.DESCRIPTOR, reflection_pb2.DESCRIPTOR)

# Method path -> (client streaming, server streaming, full name), for every method of
# every service the daemon serves.
METHODS: dict[str, tuple[bool, bool, str]] = {
    f"/{service.full_name}/{method.name}": (
        method.client_streaming,
        method.server_streaming,
        method.full_name,
    )
    for file in _FILES
    for service in file.services_by_name.values()
    for method in service.methods
}

# Metadata gRPC sets itself: never copied onto the forwarded call.
_RESERVED = ("grpc-", ":")


def _metadata(context: grpc.ServicerContext) -> tuple[tuple[str, str | bytes], ...]:
    return tuple((k, v) for k, v in context.invocation_metadata() if not k.startswith(_RESERVED))


def _timeout(context: grpc.ServicerContext) -> float | None:
    remaining = context.time_remaining()
    return None if remaining is None or remaining > 1e9 else max(remaining, 0.001)


def _relay_error(context: grpc.ServicerContext, error: grpc.RpcError) -> None:
    assert isinstance(error, grpc.Call)
    context.set_trailing_metadata(
        tuple((k, v) for k, v in (error.trailing_metadata() or ()) if not k.startswith(_RESERVED))
    )
    context.abort(error.code(), error.details() or "")


class ToMainProcess(grpc.GenericRpcHandler):  # type: ignore[type-arg]
    """A handler of every known method, forwarding it to ``channel`` (the main process)
    after ``guard`` checked its caller. ``keep`` are paths served locally (not handled here)."""

    def __init__(self, channel: grpc.Channel, guard: Guard, keep: frozenset[str] = frozenset()) -> None:
        self._channel = channel
        self._guard = guard
        self._handlers: dict[str, grpc.RpcMethodHandler[Any, Any]] = {}
        for path, (client_streaming, server_streaming, full_name) in METHODS.items():
            if path in keep:
                continue
            self._handlers[path] = self._handler(path, full_name, client_streaming, server_streaming)

    def service(
        self, handler_call_details: grpc.HandlerCallDetails
    ) -> grpc.RpcMethodHandler[Any, Any] | None:
        return self._handlers.get(handler_call_details.method)

    def _guarded(self, full_name: str, behavior: Callable[[Any, grpc.ServicerContext], Any]) -> Any:
        # Health and reflection have no role: every caller may use them, as on the main process.
        return self._guard(full_name, behavior) if full_name in ROLES_OF else behavior

    def _handler(
        self, path: str, full_name: str, client_streaming: bool, server_streaming: bool
    ) -> grpc.RpcMethodHandler[Any, Any]:
        channel = self._channel
        if not client_streaming and not server_streaming:
            call = channel.unary_unary(path, None, None)

            def unary(request: bytes, context: grpc.ServicerContext) -> Any:
                call_pool.held()  # waits for the main process, however quick its call there
                try:
                    return call(request, timeout=_timeout(context), metadata=_metadata(context))
                except grpc.RpcError as error:
                    _relay_error(context, error)
                    return None

            return grpc.unary_unary_rpc_method_handler(self._guarded(full_name, unary))
        if not client_streaming:
            stream = channel.unary_stream(path, None, None)

            def unary_stream(request: bytes, context: grpc.ServicerContext) -> Iterator[Any]:
                call_pool.held()
                responses = stream(request, timeout=_timeout(context), metadata=_metadata(context))
                context.add_callback(responses.cancel)
                try:
                    yield from responses
                except grpc.RpcError as error:
                    _relay_error(context, error)

            return grpc.unary_stream_rpc_method_handler(self._guarded(full_name, unary_stream))
        both = channel.stream_stream(path, None, None)

        def stream_stream(requests: Iterator[bytes], context: grpc.ServicerContext) -> Iterator[Any]:
            call_pool.held()
            responses = both(requests, timeout=_timeout(context), metadata=_metadata(context))
            context.add_callback(responses.cancel)
            try:
                yield from responses
            except grpc.RpcError as error:
                _relay_error(context, error)

        return grpc.stream_stream_rpc_method_handler(stream_stream)
