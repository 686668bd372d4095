"""Credentials never show: not in the daemon's log (at DEBUG, start-up included), not
in a gRPC error message, not in the command line's output.

Per scheme, a daemon runs with credentials in its environment that the server
accepts, each holding a marker (S3: secret key and session token; Azure: the
account key), follows a checkpoint and is queried through the CLI. Then the error
paths: a bucket that does not exist, a URI with credentials written into it (by
``--job`` and through ``FollowJob``), and where the server checks credentials, a
daemon started with a wrong secret (Azure: a wrong account key; GCS: a service
account key whose token exchange the server refuses). No text any of them printed
holds a secret.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import pytest

from epochstate.client.errors import EpochStateClientError
from epochstate.devtools.stores import CheckpointMirror, CheckpointStore
from epochstate.devtools.stores.azure import ACCOUNT, connection_string
from tests.e2e.test_oracle import QUERIES
from tests.fixtures.daemon import DaemonProcess
from tests.fixtures.streams import FileStream

MARKER = "SECRETMARKER7f3a9c"
STORES = {"s3a": "s3_server", "gs": "gcs_server", "abfss": "azure_server", "hdfs": "hdfs_cluster"}


@pytest.fixture(scope="module")
def checkpoint(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A small finished checkpoint, written once and mirrored to each store."""
    schema, build, rows, mode = QUERIES["dedup"]
    base = tmp_path_factory.mktemp("credentials")
    stream = FileStream(spark, base / "in", base / "cp", build, schema, mode).start()
    try:
        for batch in range(2):
            stream.feed(rows(batch))
    finally:
        stream.stop()
    return base / "cp"


@dataclass
class Case:
    """The environments of one scheme: accepted credentials, and wrong ones."""

    good: dict[str, str]
    secrets: list[str]
    bad: dict[str, str] | None = None
    texts: list[str] = field(default_factory=list)


def _service_account(path: Path, token_uri: str) -> list[str]:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    ).decode()
    path.write_text(
        json.dumps(
            {
                "type": "service_account",
                "project_id": "epochstate-test",
                "private_key_id": f"{MARKER}-key-id",
                "private_key": pem,
                "client_email": "reader@epochstate-test.iam.gserviceaccount.com",
                "client_id": "1",
                "token_uri": token_uri,
            }
        )
    )
    body = [line for line in pem.splitlines() if line and not line.startswith("-----")]
    return [f"{MARKER}-key-id", *body[1:-1]]


def _case(scheme: str, store: Any, tmp_path: Path) -> Case:
    if scheme == "s3a":
        secret, token = f"{MARKER}-aws-secret", f"{MARKER}-aws-session-token"
        return Case(
            {**store.env, "AWS_SECRET_ACCESS_KEY": secret, "AWS_SESSION_TOKEN": token}, [secret, token]
        )
    if scheme == "gs":
        # The emulator takes anonymous calls only: the wrong credentials are a real
        # service account key, signed with, whose token exchange is refused.
        key_file = tmp_path / "service-account.json"
        secrets = _service_account(key_file, f"{store.endpoint}/token")
        return Case(dict(store.env), secrets, {**store.env, "GOOGLE_APPLICATION_CREDENTIALS": str(key_file)})
    if scheme == "abfss":
        wrong = base64.b64encode(f"{MARKER}-wrong-account-key".encode()).decode()
        bad = {
            **store.env,
            "AZURE_STORAGE_CONNECTION_STRING": connection_string(ACCOUNT, wrong, store.endpoint),
        }
        return Case(dict(store.env), [store.key, wrong], bad)
    return Case(dict(store.env), [])  # HDFS with simple authentication: a user name, no secret


def _cli(*args: str, env: dict[str, str]) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "epochstate.cli.app", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **env},
    )
    # What the command printed (not its arguments, which may hold a secret on purpose).
    return f"epochstate {args[0]} -> {done.returncode}\n{done.stdout}{done.stderr}"


def _with_credentials(uri: str, secret: str) -> str:
    scheme, rest = uri.split("://", 1)
    if scheme == "abfss":
        return f"{scheme}://{rest.replace('@', f':{secret}@', 1)}"
    return f"{scheme}://reader:{secret}@{rest}"


@pytest.fixture(params=sorted(STORES))
def scheme(request: pytest.FixtureRequest) -> Iterator[str]:
    yield request.param


def test_no_secret_in_logs_errors_or_output(
    scheme: str, checkpoint: Path, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    store: CheckpointStore = request.getfixturevalue(STORES[scheme])
    case = _case(scheme, store, tmp_path)
    mirror = CheckpointMirror(store, checkpoint, store.new_bucket(), "cp")
    mirror.sync()
    uri = scheme + mirror.uri[mirror.uri.index("://") :]
    inline = _with_credentials(uri, f"{MARKER}-inline")
    case.secrets.append(f"{MARKER}-inline")
    debug = ["--log-level", "DEBUG"]

    # Wrong credentials: the daemon cannot read the checkpoint and does not start.
    refused = None
    if case.bad is not None:
        refused = DaemonProcess(tmp_path / "refused", {"bad": uri}, extra_args=debug, env=case.bad)
        with pytest.raises(RuntimeError, match="daemon exited"):
            refused.start(timeout=120)
    # Credentials in the URI: refused at once, without echoing them.
    written = _cli(
        "daemon",
        "--job",
        f"inline={inline}",
        "--data-dir",
        str(tmp_path / "inline"),
        "--listen",
        "127.0.0.1:0",
        "--listen-unix",
        "",
        *debug,
        env=case.good,
    )
    assert "credentials or a query in the URI" in written, written
    case.texts.append(written)

    daemon = DaemonProcess(tmp_path / "daemon", {"good": uri}, extra_args=debug, env=case.good).start(
        timeout=60
    )
    try:
        committed = sorted(int(p.name) for p in (checkpoint / "commits").iterdir() if p.name.isdigit())
        daemon.wait_for_epoch("good", committed[-1], timeout=60)
        with daemon.client() as client:
            for job, target in (("missing", store.uri("no-such-bucket", "cp")), ("inline", inline)):
                try:
                    client.follow(job, target, timeout=60)
                except (EpochStateClientError, grpc.RpcError) as error:
                    case.texts.append(f"FollowJob({job}): {error!r} {error}")
                else:
                    pytest.fail(f"FollowJob({job}, {target!r}) did not fail")
        at_daemon = ["--target", daemon.target, "--json"]
        for args in (
            ["jobs"],
            ["describe", "good"],
            ["scan", "good", "--limit", "3"],
            ["describe", "missing"],
        ):
            case.texts.append(_cli(*args, *at_daemon, env=case.good))
    finally:
        daemon.stop()
    case.texts.append(daemon.log_path.read_text(errors="replace"))
    if refused is not None:
        case.texts.append(refused.log_path.read_text(errors="replace"))

    everything = "\n".join(case.texts)
    # The paths above did run: at DEBUG, into the error for the missing bucket.
    assert "DEBUG epochstate.daemon.runtime: following job good" in everything
    assert "no-such-bucket" in everything and "metadata" in everything
    leaks = [s for s in case.secrets if s in everything]
    assert not leaks, f"{scheme}: secrets in the output: {leaks}"
    assert MARKER not in everything, [line for line in everything.splitlines() if MARKER in line][:5]
