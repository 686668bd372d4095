"""The method table of ``epochstate.v1.EpochState``, registered on a gRPC server.

The table comes from the service descriptor, so every rpc of the contract must
have its handler (a missing one fails at start-up, not at the first call). The
reads answer with wire bytes the servicer framed itself (no response serializer:
building a ``MultiGetResponse`` only to serialize it again cost as much as the
read); the other methods return messages. Each unary method is timed and counted
by status code here, once per call, instead of through a server interceptor;
here too each handler gets the daemon's ``guard`` (who may call it, see
:mod:`epochstate.daemon.server.security`): a handler's context, unlike a Python
server interceptor, sees the caller's TLS identity.

A request that is not a message of its type (bytes protobuf cannot parse) would
end in gRPC's own INTERNAL, without a reason: the deserializer hands such bytes
on as :class:`Undecodable`, and the handler answers BAD_REQUEST.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import grpc
from google.protobuf.descriptor import ServiceDescriptor
from google.protobuf.message import DecodeError
from google.protobuf.message_factory import GetMessageClass

from epochstate.core.errors import BadRequest
from epochstate.daemon.server.metrics import DaemonMetrics
from epochstate.daemon.server.status import abort
from epochstate.v1 import epochstate_pb2 as pb

SERVICE = pb.DESCRIPTOR.services_by_name["EpochState"]
# Methods whose handlers return serialized responses (bytes).
RAW_RESPONSES = frozenset({"Get", "MultiGet", "Scan", "History", "Changes"})

Behavior = Callable[[Any, grpc.ServicerContext], Any]
Guard = Callable[[str, Behavior], Behavior]
"""Wraps a method's behavior (by the method's full name) with a check of its caller."""


def _open(method: str, behavior: Behavior) -> Behavior:
    return behavior


@dataclass(frozen=True, slots=True)
class Undecodable:
    """A request whose bytes do not parse as its message type."""

    error: str


def _lenient(parse: Callable[[bytes], Any]) -> Callable[[bytes], Any]:
    def parse_or_undecodable(data: bytes) -> Any:
        try:
            return parse(data)
        except DecodeError as error:
            return Undecodable(str(error) or "malformed")

    return parse_or_undecodable


def _refusing_undecodable(name: str, behavior: Callable[[Any, grpc.ServicerContext], Any]) -> Any:
    def handle(request: Any, context: grpc.ServicerContext) -> Any:
        if isinstance(request, Undecodable):
            abort(context, BadRequest(f"the request does not parse as {name}: {request.error}"))
        return behavior(request, context)

    return handle


def method_handlers(
    servicer: object, metrics: DaemonMetrics, service: ServiceDescriptor = SERVICE, guard: Guard = _open
) -> dict[str, grpc.RpcMethodHandler[Any, Any]]:
    """The handler of each rpc of ``service`` (default ``epochstate.v1.EpochState``), by method name;
    each checks its caller through ``guard`` first (default: everyone may call)."""
    handlers: dict[str, grpc.RpcMethodHandler[Any, Any]] = {}
    for method in service.methods:
        behavior = guard(
            method.full_name,
            _refusing_undecodable(method.input_type.full_name, getattr(servicer, method.name)),
        )
        request = _lenient(GetMessageClass(method.input_type).FromString)
        response: Callable[[Any], bytes] | None = GetMessageClass(method.output_type).SerializeToString
        if method.name in RAW_RESPONSES:
            response = None
        if method.client_streaming:
            raise TypeError(f"{method.full_name}: client streaming is not served")
        if method.server_streaming:
            handlers[method.name] = grpc.unary_stream_rpc_method_handler(
                behavior, request_deserializer=request, response_serializer=response
            )
        else:
            handlers[method.name] = grpc.unary_unary_rpc_method_handler(
                metrics.observed(method.name, behavior),
                request_deserializer=request,
                response_serializer=response,
            )
    return handlers


def add_to_server(
    servicer: object,
    server: grpc.Server,
    metrics: DaemonMetrics,
    service: ServiceDescriptor = SERVICE,
    guard: Guard = _open,
) -> None:
    """Serve ``servicer`` as ``service`` (default ``epochstate.v1.EpochState``) on ``server``,
    each call checked by ``guard`` first."""
    handlers = method_handlers(servicer, metrics, service, guard)
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(service.full_name, handlers),))
    # Registered methods are matched by the gRPC core, without a per-call handler lookup.
    server.add_registered_method_handlers(service.full_name, handlers)  # type: ignore[attr-defined]
