"""Every rpc of every service, tried with every kind of wrong credentials against real
daemons with TLS: none gets through. The right identity gets through on each."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from epochstate.client.routed import RoutedClient
from epochstate.client.tls import TlsOptions, open_channel
from epochstate.v1 import epochstate_pb2 as pb
from tests.fixtures.certs import Certificates, Issued
from tests.fixtures.daemon import DaemonProcess
from tests.server.security.calls import AUTH_CODES, Outcome, Rpc, call, every_rpc
from tests.server.security.conftest import ROLES, TOKENS, client_tls, token_files

Attempt = tuple[str, TlsOptions | None, tuple[tuple[str, str], ...], Callable[[Rpc], bool]]


def _every(rpc: Rpc) -> bool:
    return True


def _not(role: str) -> Callable[[Rpc], bool]:
    return lambda rpc: not rpc.allows(role)


@contextmanager
def _channel(target: str, tls: TlsOptions | None) -> Iterator[grpc.Channel]:
    channel = grpc.insecure_channel(target) if tls is None else open_channel(target, tls)
    try:
        yield channel
    finally:
        channel.close()


def _run(
    target: str, attempts: list[Attempt], rpcs: list[Rpc], table: list[tuple[str, str, Outcome]]
) -> None:
    for label, tls, metadata, applies in attempts:
        with _channel(target, tls) as channel:
            for rpc in filter(applies, rpcs):
                table.append((label, rpc.name, call(channel, rpc, metadata)))


def _report(title: str, table: list[tuple[str, str, Outcome]]) -> int:
    succeeded = sum(1 for _, _, outcome in table if outcome.code not in AUTH_CODES)
    print(f"\n{title}: {len(table)} calls, {succeeded} succeeded")
    for label, method, outcome in table:
        print(f"  {label:<40} {method:<12} {outcome}")
    return succeeded


def _settings(
    certs: Certificates, roots: list[str], *, mutual: bool, tokens: dict[str, Path]
) -> dict[str, object]:
    tls: dict[str, str] = {"cert": str(certs.server.cert), "key": str(certs.server.key)}
    if mutual:
        tls["client_ca"] = str(certs.ca.pem_path)
    return {
        "tls": tls,
        "auth": {
            "enabled": True,
            "roles": ROLES,
            "tokens": {k: str(v) for k, v in tokens.items()},
            "checkpoint_roots": roots,
        },
        "poll_interval": 0.2,
    }


def test_no_call_gets_through_with_wrong_credentials_over_mtls(
    certificates: Certificates,
    orders_checkpoint: Path,
    secure_daemon: Callable[..., DaemonProcess],
    zk_connect: str,
) -> None:
    certs = certificates
    reader = client_tls(certs, certs.reader)
    settings = _settings(certs, [str(orders_checkpoint.parent)], mutual=True, tokens={})
    settings["zookeeper"] = zk_connect
    daemon = secure_daemon(settings, jobs={"orders": str(orders_checkpoint)}, tls=reader)
    daemon.wait_for_epoch("orders", 1, timeout=60)
    rpcs = every_rpc(str(orders_checkpoint))

    def as_(issued: Issued) -> TlsOptions:
        return client_tls(certs, issued)

    denied: list[Attempt] = [
        ("plaintext to the TLS port", None, (), _every),
        ("TLS, no client certificate", TlsOptions(ca=certs.ca.pem_path), (), _every),
        ("client certificate of a wrong CA", as_(certs.stranger), (), _every),
        (
            "client trusting a wrong CA",
            client_tls(certs, certs.admin, ca=certs.wrong_ca.pem_path),
            (),
            _every,
        ),
        ("expired client certificate", as_(certs.expired), (), _every),
        ("identity without roles", as_(certs.unknown), (), _every),
        ("read-only identity", reader, (), _not("read")),
        ("report-only identity", as_(certs.reporter), (), _not("report")),
        ("admin-only identity", as_(certs.admin), (), _not("admin")),
    ]
    table: list[tuple[str, str, Outcome]] = []
    _run(daemon.target, denied, rpcs, table)
    succeeded = _report("mTLS daemon, wrong credentials", table)
    assert succeeded == 0
    handshake = {
        "plaintext to the TLS port",
        "TLS, no client certificate",
        "client certificate of a wrong CA",
    }
    handshake |= {"client trusting a wrong CA", "expired client certificate"}
    for label, method, outcome in table:
        expected = grpc.StatusCode.UNAVAILABLE if label in handshake else grpc.StatusCode.PERMISSION_DENIED
        assert outcome.code == expected, (label, method, outcome)
        if expected == grpc.StatusCode.PERMISSION_DENIED:
            assert outcome.reason == "ROLE_MISSING", (label, method, outcome)

    allowed: list[Attempt] = [
        ("read identity", reader, (), lambda r: r.role == "read"),
        ("report identity", as_(certs.reporter), (), lambda r: r.allows("report")),
        ("admin identity", as_(certs.admin), (), lambda r: r.role == "admin"),
    ]
    passed: list[tuple[str, str, Outcome]] = []
    _run(daemon.target, allowed, rpcs, passed)
    _report("mTLS daemon, the right identity", passed)
    assert len(passed) == len(rpcs) + 1  # Locate twice: read and report may call it
    rpc_paths = {rpc.name: rpc.path for rpc in rpcs}
    for label, method, outcome in passed:
        assert outcome.code not in AUTH_CODES, (label, method, outcome)
        # The commands name a source (or subject) that does not exist: past the gate, NOT_FOUND
        # (a dry-run Prune: OK); a swap of jobs that read nothing aligned: JOBS_NOT_ALIGNED.
        if method == "PlanSwap":
            assert outcome.reason in ("SUBJECT_NOT_FOUND", "JOBS_NOT_ALIGNED"), (label, method, outcome)
        elif method in ("CatchUp", "Align", "Abort", "Prune", "SwapStatus", "AbortSwap"):
            assert outcome.code in (grpc.StatusCode.NOT_FOUND, grpc.StatusCode.OK), (label, method, outcome)
        elif rpc_paths[method].startswith("/epochstate.v1.JobsAdmin/"):  # past the gate: not in a group
            assert (outcome.code, outcome.reason) == (grpc.StatusCode.FAILED_PRECONDITION, "NO_GROUP"), method
        else:
            assert outcome.code == grpc.StatusCode.OK, (label, method, outcome)

    # Probes need no identity, even over mTLS... as long as the handshake succeeds.
    with open_channel(daemon.target, as_(certs.unknown)) as channel:
        answer = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=10)
    assert answer.status == health_pb2.HealthCheckResponse.SERVING

    # A routed client presents the same TLS options on the connection of every replica it locates.
    with RoutedClient([daemon.target], tls=reader) as routed:
        assert routed.locate("orders").shards[0].replicas[0].address == daemon.target
        assert routed.get("orders", ["u1"], epoch=1).epoch == 1


def test_no_call_gets_through_without_the_right_token(
    certificates: Certificates,
    orders_checkpoint: Path,
    secure_daemon: Callable[..., DaemonProcess],
    tmp_path: Path,
) -> None:
    certs = certificates
    files = token_files(tmp_path / "tokens")
    server_only = TlsOptions(ca=certs.ca.pem_path)
    reader = TlsOptions(ca=certs.ca.pem_path, token_file=files["dashboards"])
    settings = _settings(certs, [str(orders_checkpoint.parent)], mutual=False, tokens=files)
    daemon = secure_daemon(settings, jobs={"orders": str(orders_checkpoint)}, tls=reader)
    daemon.wait_for_epoch("orders", 1, timeout=60)
    rpcs = every_rpc(str(orders_checkpoint))

    def bearer(token: str) -> tuple[tuple[str, str], ...]:
        return (("authorization", f"Bearer {token}"),)

    denied: list[Attempt] = [
        ("TLS, no token", server_only, (), _every),
        ("unknown token", server_only, bearer("not-a-token-of-anyone-here"), _every),
        ("a token's prefix", server_only, bearer(TOKENS["ops"][:-1]), _every),
        ("read-only token", reader, (), _not("read")),
    ]
    table: list[tuple[str, str, Outcome]] = []
    _run(daemon.target, denied, rpcs, table)
    succeeded = _report("TLS daemon with tokens, wrong credentials", table)
    assert succeeded == 0
    for label, _, outcome in table:
        if label == "read-only token":
            assert (outcome.code, outcome.reason) == (grpc.StatusCode.PERMISSION_DENIED, "ROLE_MISSING")
        else:
            assert (outcome.code, outcome.reason) == (grpc.StatusCode.UNAUTHENTICATED, "NOT_AUTHENTICATED")

    allowed: list[Attempt] = [
        ("read token", reader, (), lambda r: r.role == "read"),
        ("report token", server_only, bearer(TOKENS["spark-listener"]), lambda r: r.allows("report")),
        ("admin token", server_only, bearer(TOKENS["ops"]), lambda r: r.name == "FollowJob"),
    ]
    passed: list[tuple[str, str, Outcome]] = []
    _run(daemon.target, allowed, rpcs, passed)
    _report("TLS daemon with tokens, the right token", passed)
    assert [o.code for _, _, o in passed] == [grpc.StatusCode.OK] * len(passed) and len(passed) == 13

    # FollowJob, or a report of a job not followed yet, outside the checkpoint roots (also by
    # way of ".."): refused, whoever asks.
    outside = [str(tmp_path / "elsewhere"), f"{orders_checkpoint.parent}/../../etc"]
    tries: list[tuple[str, str, Any]] = [
        ("ops", "FollowJob", pb.FollowJobRequest(job="x", checkpoint=checkpoint)) for checkpoint in outside
    ]
    tries += [
        ("spark-listener", "ReportEpoch", pb.ReportEpochRequest(job="y", epoch=0, checkpoint=checkpoint))
        for checkpoint in outside
    ]
    for identity, method, request in tries:
        tls = TlsOptions(ca=certs.ca.pem_path, token_file=files[identity])
        with open_channel(daemon.target, tls) as channel:
            outcome = call(channel, Rpc(f"/epochstate.v1.EpochState/{method}", "", request))
        assert (outcome.code, outcome.reason) == (
            grpc.StatusCode.PERMISSION_DENIED,
            "CHECKPOINT_NOT_ALLOWED",
        ), (method, request)


def test_the_calls_tried_are_every_method_of_every_service() -> None:
    """The list the tests above try is checked against the contract itself: a method
    added to the proto without a role and a try here fails this test."""
    declared = {
        f"/{service.full_name}/{method.name}"
        for service in pb.DESCRIPTOR.services_by_name.values()
        for method in service.methods
    }
    tried = {rpc.path for rpc in every_rpc("/nowhere")}
    assert tried == declared, (sorted(declared - tried), sorted(tried - declared))
