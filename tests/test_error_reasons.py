"""The error contract cannot drift: daemon table, reason table, client table and proto agree.

Each daemon error class names its reason, the core documents each reason with its
code (``core/reasons.py``) and the daemon sends that code (``daemon/server/status.py``),
the client maps reasons back (``client/errors.py``) and the proto lists them. These
tests hold the four together and check the client's fallback to the status code
against a real loopback gRPC server; the tests against the real daemon
(``tests/e2e/test_error_details.py``) prove what it sends.
"""

from __future__ import annotations

import re
from concurrent import futures
from pathlib import Path

import grpc
import pytest
from google.protobuf import any_pb2
from google.rpc import error_details_pb2, status_pb2  # type: ignore[import-untyped]
from grpc_status import rpc_status

from epochstate.client import EpochStateClient
from epochstate.client import errors as client_errors
from epochstate.core import reasons
from epochstate.core.errors import EpochStateError
from epochstate.daemon.server import alignment_admin, service, status
from epochstate.daemon.store.catalog import JobNotFound

PROTO = Path(__file__).resolve().parents[1] / "proto" / "src" / "epochstate" / "v1" / "epochstate.proto"


# Everything the servicers can raise is loaded.
SERVICERS = (service.EpochStateService, alignment_admin.AlignmentAdminService)


def _subclasses(root: type[EpochStateError]) -> set[type[EpochStateError]]:
    found: set[type[EpochStateError]] = set()
    todo = [root]
    while todo:
        for sub in todo.pop().__subclasses__():
            if sub not in found:
                found.add(sub)
                todo.append(sub)
    return found


def _server_code(kind: type[EpochStateError]) -> grpc.StatusCode:
    error = kind.__new__(kind)  # status_for reads the class's reason only
    return status.status_for(error)


def test_each_reason_is_defined_once_under_its_own_name() -> None:
    constants = {
        name: value
        for name, value in vars(reasons).items()
        if name.isupper() and isinstance(value, str) and name != "DOMAIN"
    }
    assert constants == {name: name for name in reasons.REASONS}
    for name, reason in reasons.REASONS.items():
        assert re.fullmatch(r"[A-Z][A-Z0-9_]*[A-Z0-9]", name), name
        assert reason.name == name
        assert reason.code in grpc.StatusCode.__members__ and reason.code != "OK", name
        assert reason.meaning.strip() and reason.action.strip(), f"{name} is not documented"


def test_a_reason_means_one_status_code_wherever_it_is_declared() -> None:
    """Any daemon-side error class with a reason is sent with the reason's own code:
    the code is read from the reason's table, so no second table can drift."""
    server_side = {
        k for k in _subclasses(EpochStateError) if not k.__module__.startswith("epochstate.client")
    }
    declared = {k for k in server_side if k.reason != reasons.INTERNAL}
    assert len(declared) >= 30  # the servicers' errors are loaded (SERVICERS)
    for kind in declared:
        assert kind.reason in reasons.REASONS, f"{kind.__qualname__}: undocumented reason {kind.reason}"
        assert _server_code(kind).name == reasons.REASONS[kind.reason].code, (kind.__qualname__, kind.reason)


def test_the_client_table_covers_every_reason_with_a_class_of_its_code() -> None:
    assert set(client_errors.BY_REASON) == set(reasons.REASONS)
    for name, cls in client_errors.BY_REASON.items():
        assert issubclass(cls, EpochStateError)
        if cls is not client_errors.EpochStateClientError:
            assert cls.code.name == reasons.REASONS[name].code, (name, cls.__qualname__)


def test_the_proto_lists_every_reason_with_its_code() -> None:
    text = PROTO.read_text()
    assert f'domain "{reasons.DOMAIN}"' in text
    listed = dict(re.findall(r"^// ([A-Z][A-Z0-9_]+) \(([A-Z_]+)\)$", text, re.M))
    assert listed == {name: r.code for name, r in reasons.REASONS.items()}


def test_the_rich_status_carries_reason_domain_metadata_and_message() -> None:
    error = JobNotFound("unknown job 'x'", metadata={"job": "x"})
    sent = status.rich_status(error)
    assert sent.code == grpc.StatusCode.NOT_FOUND and sent.details == "unknown job 'x'"
    ((key, value),) = sent.trailing_metadata
    assert key == "grpc-status-details-bin"
    decoded = status_pb2.Status.FromString(value)
    assert decoded.code == grpc.StatusCode.NOT_FOUND.value[0] and decoded.message == "unknown job 'x'"
    (detail,) = decoded.details
    info = error_details_pb2.ErrorInfo()
    assert detail.Unpack(info)
    assert (info.reason, info.domain, dict(info.metadata)) == (
        "JOB_NOT_FOUND",
        "epochstate.dev",
        {"job": "x"},
    )


def test_long_messages_are_cut_to_fit_the_trailers() -> None:
    sent = status.rich_status(JobNotFound("x" * 100_000, metadata={"job": "x" * 100_000}))
    assert len(sent.details) == status.MAX_MESSAGE and sent.details.endswith("...")
    decoded = status_pb2.Status.FromString(sent.trailing_metadata[0][1])
    assert decoded.message == sent.details
    info = error_details_pb2.ErrorInfo()
    decoded.details[0].Unpack(info)
    assert len(info.metadata["job"]) == status.MAX_METADATA_VALUE


def test_unmapped_errors_are_internal() -> None:
    sent = status.rich_status(EpochStateError("boom"))
    assert sent.code == grpc.StatusCode.INTERNAL
    info = error_details_pb2.ErrorInfo()
    status_pb2.Status.FromString(sent.trailing_metadata[0][1]).details[0].Unpack(info)
    assert info.reason == reasons.INTERNAL


def test_client_errors_are_rooted_in_the_core() -> None:
    assert issubclass(client_errors.EpochStateClientError, EpochStateError)
    local = client_errors.InvalidArgument("raised by the client")
    assert local.reason == "" and local.code == grpc.StatusCode.INVALID_ARGUMENT and local.metadata == {}


def _server_failing_with(
    code: grpc.StatusCode, info: error_details_pb2.ErrorInfo | None
) -> tuple[grpc.Server, str]:
    """A real gRPC server on loopback whose ListJobs fails with ``code`` and, if given, ``info``."""

    def list_jobs(request: bytes, context: grpc.ServicerContext) -> bytes:
        if info is None:
            context.abort(code, "m")
        detail = any_pb2.Any()
        detail.Pack(info)
        context.abort_with_status(
            rpc_status.to_status(status_pb2.Status(code=code.value[0], message="m", details=[detail]))
        )
        raise AssertionError("unreachable")

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=1))
    handler = grpc.unary_unary_rpc_method_handler(list_jobs)
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler("epochstate.v1.EpochState", {"ListJobs": handler}),)
    )
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    return server, f"127.0.0.1:{port}"


def test_the_client_falls_back_to_the_status_code() -> None:
    """A reason it does not know (a newer daemon), another domain's, or none: the code's class."""
    precondition, not_found = grpc.StatusCode.FAILED_PRECONDITION, grpc.StatusCode.NOT_FOUND
    new = error_details_pb2.ErrorInfo(reason="A_REASON_FROM_THE_FUTURE", domain=reasons.DOMAIN)
    foreign = error_details_pb2.ErrorInfo(reason=reasons.EPOCH_NOT_READY, domain="example.com")
    not_ready = error_details_pb2.ErrorInfo(reason=reasons.EPOCH_NOT_READY, domain=reasons.DOMAIN)
    cases = [
        (precondition, new, client_errors.FailedPrecondition, new.reason),
        (precondition, foreign, client_errors.FailedPrecondition, ""),
        (precondition, None, client_errors.FailedPrecondition, ""),
        (precondition, not_ready, client_errors.EpochNotReady, reasons.EPOCH_NOT_READY),
        # A code that contradicts the reason (a proxy rewrote it): the code's class wins.
        (not_found, not_ready, client_errors.NotFound, reasons.EPOCH_NOT_READY),
    ]
    for code, info, expected, reason in cases:
        server, target = _server_failing_with(code, info)
        try:
            with (
                EpochStateClient(target, timeout=5) as client,
                pytest.raises(client_errors.EpochStateClientError) as caught,
            ):
                client.jobs()
        finally:
            server.stop(None)
        assert type(caught.value) is expected, (code, info, caught.value)
        assert (caught.value.code, caught.value.reason) == (code, reason)


def test_the_docs_list_every_reason_with_its_code() -> None:
    docs = (Path(__file__).resolve().parent.parent / "docs" / "errors.md").read_text()
    for reason in reasons.REASONS.values():
        assert f"| `{reason.name}` | `{reason.code}` |" in docs, reason.name
