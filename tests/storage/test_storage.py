"""The filesystem layer against real servers of every remote scheme (S3: moto; GCS:
fake-gcs-server; Azure Blob: Azurite; HDFS: a NameNode and a DataNode over WebHDFS)
and the local disk: the same answers from all, missing files as FileNotFoundError,
counted requests, whole files fetched once into the bounded cache."""

from __future__ import annotations

import os
import random
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from epochstate.core.storage.cache import FileCache
from epochstate.core.storage.errors import StorageUnavailable, UnsupportedLocation
from epochstate.core.storage.location import Location, StorageFactory
from epochstate.core.storage.readahead import ReadAhead
from epochstate.core.storage.retry import RetryPolicy, with_retries
from epochstate.devtools.stores import CheckpointStore
from tests.fixtures.s3 import S3Server

FILES = {"commits/0": b"v1\n{}", "commits/1": b"v1\n{}", "state/0/0/1.delta": bytes(range(256)) * 40}
# The scheme under test -> the fixture of its server.
SCHEMES = {"s3a": "s3_server", "gs": "gcs_server", "abfss": "azure_server", "hdfs": "hdfs_cluster"}


@pytest.fixture(params=sorted(SCHEMES))
def roots(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[Location, Location, StorageFactory]:
    store: CheckpointStore = request.getfixturevalue(SCHEMES[request.param])
    bucket = store.new_bucket()
    local = tmp_path / "cp"
    for name, body in FILES.items():
        (local / name).parent.mkdir(parents=True, exist_ok=True)
        (local / name).write_bytes(body)
        store.put(bucket, f"jobs/a/{name}", body)
    uri = store.uri(bucket, "jobs/a")
    uri = request.param + uri[uri.index("://") :]
    factory = StorageFactory(cache_dir=tmp_path / "cache", cache_bytes=1 << 20)
    return factory.open(str(local)), factory.open(uri), factory


def test_local_and_remote_answer_alike(roots: tuple[Location, Location, StorageFactory]) -> None:
    local, remote, _ = roots
    for root in (local, remote):
        assert sorted(root.names()) == ["commits", "state"]
        assert sorted((root / "commits").names()) == ["0", "1"]
        assert (root / "nothing").names() == []
        delta = root / "state" / "0" / "0" / "1.delta"
        assert delta.is_file() and not (root / "commits" / "7").is_file()
        assert (root / "state").is_dir()
        assert delta.read_bytes() == FILES["state/0/0/1.delta"]
        assert delta.read_range(10, 20) == FILES["state/0/0/1.delta"][10:20]
        assert delta.stat().st_size == len(FILES["state/0/0/1.delta"])
        assert delta.local_path().read_bytes() == FILES["state/0/0/1.delta"]
        assert delta.name == "1.delta" and delta.suffix == ".delta"
        with pytest.raises(FileNotFoundError):
            (root / "commits" / "7").read_bytes()
    scheme = str(remote).split("://", 1)[0]
    assert scheme in SCHEMES
    # Messages show the location as the user wrote it.
    assert str(remote / "commits" / "0").endswith("/jobs/a/commits/0")
    assert ("@" in str(remote)) == (scheme == "abfss")


def test_a_missing_bucket_is_an_empty_directory(roots: tuple[Location, Location, StorageFactory]) -> None:
    _, remote, factory = roots
    uri = str(remote)
    missing = factory.open(uri.replace("/cp-", "/no-such-", 1).replace("://cp-", "://no-such-", 1))
    assert missing.names() == [] and not (missing / "metadata").is_file()


def test_listing_gives_kind_and_size_without_more_requests(
    roots: tuple[Location, Location, StorageFactory],
) -> None:
    _, remote, factory = roots
    before = factory.stats.snapshot()
    entries = {e.name: e for e in (remote / "state" / "0" / "0").iterdir()}
    assert entries["1.delta"].is_file() and entries["1.delta"].stat().st_size == 10240
    after = factory.stats.snapshot()
    assert after.get("list", 0) - before.get("list", 0) == 1
    assert after.get("head", 0) == before.get("head", 0)


def test_whole_files_are_fetched_once(roots: tuple[Location, Location, StorageFactory]) -> None:
    _, remote, factory = roots
    delta = remote / "state" / "0" / "0" / "1.delta"
    first = delta.local_path()
    gets = factory.stats.get("get")
    assert delta.local_path() == first
    assert factory.stats.get("get") == gets
    assert factory.stats.get("cache_hits") >= 1


def test_cache_stays_within_its_bound(tmp_path: Path) -> None:
    cache = FileCache(tmp_path / "c", max_bytes=2500)
    for n in range(5):

        def fetch(target: Path, n: int = n) -> None:
            target.write_bytes(bytes([n]) * 1000)

        cache.get(f"k{n}", fetch)
    assert cache.size_bytes <= 2500
    assert len(list((tmp_path / "c").iterdir())) == 2


def test_unknown_schemes_are_refused(tmp_path: Path) -> None:
    factory = StorageFactory(cache_dir=tmp_path)
    with pytest.raises(UnsupportedLocation, match="ftp"):
        factory.open("ftp://host/cp")


def test_unreachable_storage_fails_after_bounded_retries(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A port nobody listens on: every request is refused at once.
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "x")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "y")
    factory = StorageFactory(cache_dir=tmp_path, retry=RetryPolicy(attempts=3, base=0.01, cap=0.02))
    root = factory.open("s3://bucket/cp")
    with pytest.raises(StorageUnavailable, match="after retries"):
        root.names()
    assert factory.stats.get("retries") == 2
    assert factory.stats.get("failed") == 1


def test_retries_stop_at_the_first_answer_that_is_not_transient() -> None:
    calls: list[int] = []

    def flaky() -> str:
        calls.append(1)
        if len(calls) < 3:
            raise ConnectionResetError("reset mid-read")
        return "ok"

    waits: list[float] = []
    policy = RetryPolicy(attempts=5, base=0.1, cap=0.4)
    result = with_retries(
        flaky, lambda e: isinstance(e, ConnectionError), policy, sleep=waits.append, rng=random.Random(1)
    )
    assert result == "ok" and len(calls) == 3
    assert len(waits) == 2 and all(0 <= w <= 0.4 for w in waits)
    with pytest.raises(FileNotFoundError):
        with_retries(lambda: (_ for _ in ()).throw(FileNotFoundError("x")), lambda e: False, policy)


def test_a_request_that_timed_out_is_tried_again_within_the_deadline() -> None:
    # Each try runs into a 30 s request timeout (the clock is ours: no real waits).
    now = [0.0]
    tries: list[float] = []

    def times_out() -> str:
        tries.append(now[0])
        now[0] += 30.0
        if len(tries) < 2:
            raise TimeoutError("request timed out")
        return "ok"

    def run(policy: RetryPolicy) -> str:
        tries.clear()
        now[0] = 0.0
        return with_retries(
            times_out,
            lambda e: isinstance(e, TimeoutError),
            policy,
            sleep=lambda _: None,
            clock=lambda: now[0],
        )

    with pytest.raises(TimeoutError):
        run(RetryPolicy(deadline=20.0))  # a deadline shorter than the timeout never retries one
    assert len(tries) == 1
    assert run(RetryPolicy(deadline=20.0).covering(30.0)) == "ok"
    assert len(tries) == 2
    assert RetryPolicy(deadline=20.0).covering(2.0).deadline == 20.0


def _daemon(tmp_path: Path, job: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "epochstate.cli",
            "daemon",
            "--job",
            job,
            "--data-dir",
            str(tmp_path / "d"),
            "--listen",
            "127.0.0.1:0",
            "--listen-unix",
            "",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **(env or {})},
    )


def test_the_daemon_refuses_checkpoints_it_cannot_open_with_one_line(
    s3_server: S3Server, tmp_path: Path
) -> None:
    unknown = _daemon(tmp_path, "x=ftp://host/cp")
    assert unknown.returncode == 1
    (error,) = [line for line in unknown.stderr.splitlines() if line.startswith("error:")]
    assert "unsupported scheme 'ftp'" in error
    # A bucket without a checkpoint: the daemon says which file it looked for.
    empty = _daemon(tmp_path, f"x=s3a://{s3_server.new_bucket()}/nothing", s3_server.env)
    assert empty.returncode == 1
    (error,) = [line for line in empty.stderr.splitlines() if line.startswith("error:")]
    assert "/nothing/metadata" in error


def test_an_unreachable_namenode_is_one_line_naming_its_webhdfs_address(tmp_path: Path) -> None:
    # Nothing listens on the WebHDFS port hdfs-site.xml names: refused at once.
    port = _free_port()
    conf = tmp_path / "conf"
    conf.mkdir()
    (conf / "hdfs-site.xml").write_text(
        "<configuration><property><name>dfs.namenode.http-address</name>"
        f"<value>127.0.0.1:{port}</value></property></configuration>"
    )
    done = _daemon(tmp_path, "x=hdfs://127.0.0.1:8020/cp", {"HADOOP_CONF_DIR": str(conf)})
    assert done.returncode == 1
    (error,) = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert "hdfs://127.0.0.1:8020/cp/metadata" in error and f"port={port}" in error
    assert "Connection refused" in error


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def test_uniquely_named_files_are_cached_without_asking_again(
    roots: tuple[Location, Location, StorageFactory],
) -> None:
    _, remote, factory = roots
    delta = remote / "state" / "0" / "0" / "1.delta"
    before = factory.stats.snapshot()
    first = delta.local_path(immutable=True)
    again = delta.local_path(immutable=True)
    spent = {op: factory.stats.get(op) - before.get(op, 0) for op in ("head", "get")}
    assert first == again and first.read_bytes() == FILES["state/0/0/1.delta"]
    assert spent == {"head": 0, "get": 1}
    # A name that may be rewritten is asked about (one HEAD) every time.
    delta.local_path()
    delta.local_path()
    assert factory.stats.get("head") - before.get("head", 0) == 2


def test_read_ahead_is_the_file_and_a_missing_file_stays_missing_until_it_appears(
    request: pytest.FixtureRequest, roots: tuple[Location, Location, StorageFactory]
) -> None:
    _, remote, factory = roots
    delta = remote / "state" / "0" / "0" / "1.delta"
    gets = factory.stats.get("get")
    remote.storage.read_ahead(delta.path)
    assert delta.read_bytes() == FILES["state/0/0/1.delta"]
    assert factory.stats.get("get") - gets == 1  # the early read was the read
    later = remote / "commits" / "2"
    remote.storage.read_ahead(later.path)
    with pytest.raises(FileNotFoundError):
        later.read_bytes()
    store: CheckpointStore = request.getfixturevalue(SCHEMES[request.node.callspec.params["roots"]])
    bucket, _, key = later.path.lstrip("/").partition("/")
    store.put(bucket, key, b"v1\n{}")
    assert later.read_bytes() == b"v1\n{}"  # nothing negative is kept


def test_reads_ahead_are_bounded() -> None:
    ahead = ReadAhead(str.encode, workers=1, max_files=2)
    for name in ("a", "b", "c"):
        ahead.start(name)
    assert len(ahead) == 2
    assert ahead.take("c") == b"c" and ahead.take("b") == b"b"
    assert ahead.take("a") is None  # dropped first: read when asked for


def test_what_gcsfs_already_retried_is_not_retried_again(tmp_path: Path) -> None:
    """gcsfs retries a transient HTTP error (a refused token exchange among them) six
    times with back-off before raising it: the storage layer reports it at once rather
    than multiply that wait; what gcsfs does not retry, it still does."""
    import gcsfs
    from gcsfs.retry import HttpError

    from epochstate.core.storage.remote import RemoteStorage

    storage = RemoteStorage(
        gcsfs.GCSFileSystem(token="anon"), "gs", retry=RetryPolicy(attempts=3, base=0.01, cap=0.02)
    )
    refused = HttpError({"code": 401, "message": "Invalid Credentials"})

    def refuse() -> None:
        raise refused

    with pytest.raises(StorageUnavailable, match="Invalid Credentials"):
        storage._call("get", "bucket/cp/metadata", refuse)
    assert storage.stats.get("retries") == 0

    def reset() -> None:
        raise ConnectionResetError("reset by peer")  # gcsfs's own retries do not cover it here

    with pytest.raises(StorageUnavailable, match="reset by peer"):
        storage._call("get", "bucket/cp/metadata", reset)
    assert storage.stats.get("retries") == 2


def test_gcs_credentials_refused_for_good_end_the_request_at_once(tmp_path: Path) -> None:
    """gcsfs retries a failed token refresh six times with back-off (about 35 s), even one
    the token endpoint refuses for good: the storage layer asks for the token first and
    reports such a refusal after one exchange, without calling the filesystem."""
    import json
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    import gcsfs
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    from epochstate.core.storage.remote import RemoteStorage

    exchanges: list[str] = []

    class Refusing(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            exchanges.append(self.path)
            self.rfile.read(int(self.headers["Content-Length"]))
            body = json.dumps({"error": "invalid_grant", "error_description": "Invalid JWT Signature."})
            self.send_response(400)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(body.encode())

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Refusing)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    ).decode()
    account = {
        "type": "service_account",
        "project_id": "epochstate-test",
        "private_key_id": "1",
        "private_key": pem,
        "client_email": "reader@epochstate-test.iam.gserviceaccount.com",
        "client_id": "1",
        "token_uri": f"http://127.0.0.1:{server.server_port}/token",
    }
    (tmp_path / "key.json").write_text(json.dumps(account))
    calls: list[str] = []
    try:
        fs = gcsfs.GCSFileSystem(token=str(tmp_path / "key.json"), endpoint_url="http://127.0.0.1:9")
        storage = RemoteStorage(fs, "gs", retry=RetryPolicy(attempts=3, base=0.01, cap=0.02))
        with pytest.raises(StorageUnavailable, match="Invalid Credentials"):
            storage._call("list", "bucket/cp/commits", lambda: calls.append("called"))
    finally:
        server.shutdown()
        server.server_close()
    assert exchanges == ["/token"] and calls == []
    assert storage.stats.get("retries") == 0
