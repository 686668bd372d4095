"""A real S3-protocol server on loopback (moto's server mode, a child process), and a
mirror that uploads a local Spark checkpoint to it as Spark writes: for tests and
benchmarks (needs the dev extra's ``moto[server]`` and ``boto3``).

The pyspark wheel ships no S3A jars, so Spark writes locally and the mirror copies
each file to S3 in Spark's order: within every pass, state and log files before any
new ``commits/<n>`` (Spark commits an epoch only after its state files are written).
Temporary and hidden files are never uploaded (S3A writes an object once, at close);
files Spark deletes are deleted. The daemon under test only ever sees ``s3://``.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

REGION = "us-east-1"


class S3Server:
    """One ``moto_server`` process; :attr:`env` is what a client needs to reach it."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            self.port = probe.getsockname()[1]
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self.env = {
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_ACCESS_KEY_ID": "epochstate-test",
            "AWS_SECRET_ACCESS_KEY": "epochstate-test-secret",
            "AWS_DEFAULT_REGION": REGION,
            "AWS_EC2_METADATA_DISABLED": "true",
        }
        self.process: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 30.0) -> S3Server:
        self.workdir.mkdir(parents=True, exist_ok=True)
        log = (self.workdir / "moto.log").open("wb")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(self.port)],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"moto_server exited: {(self.workdir / 'moto.log').read_text()[-2000:]}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                    return self
            except OSError:
                time.sleep(0.1)
        raise RuntimeError(f"moto_server did not listen on {self.port} within {timeout}s")

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    def client(self) -> Any:
        import boto3

        return boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            region_name=REGION,
            aws_access_key_id=self.env["AWS_ACCESS_KEY_ID"],
            aws_secret_access_key=self.env["AWS_SECRET_ACCESS_KEY"],
        )

    def new_bucket(self) -> str:
        name = f"cp-{uuid.uuid4().hex[:12]}"
        self.client().create_bucket(Bucket=name)
        return name


def _uploadable(relative: str) -> bool:
    parts = relative.split("/")
    return not any(p.startswith(".") or ".tmp" in p or p.endswith(".crc") for p in parts)


def _is_commit(relative: str) -> bool:
    return relative.startswith("commits/")


class CheckpointMirror:
    """Copies ``local`` to ``s3://bucket/prefix`` in Spark's order, in a thread, until
    :meth:`stop` (which does a last full pass)."""

    def __init__(self, server: S3Server, local: Path, bucket: str, prefix: str, interval: float = 0.05):
        self.local = local
        self.bucket = bucket
        self.prefix = prefix.strip("/")
        self.interval = interval
        self.uri = f"s3://{bucket}/{self.prefix}"
        self._s3 = server.client()
        self._seen: dict[str, tuple[int, int]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="checkpoint-mirror", daemon=True)
        self.uploads = 0
        self.deletes = 0
        self.error: BaseException | None = None

    def start(self) -> CheckpointMirror:
        self._thread.start()
        return self

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                self.sync()
                self._stop.wait(self.interval)
        except BaseException as error:  # surfaced by stop()
            self.error = error

    def sync(self) -> None:
        """One pass: new or changed files (commits last), then deletions."""
        found: dict[str, tuple[int, int]] = {}
        for root, _, files in os.walk(self.local):
            for name in files:
                path = Path(root, name)
                relative = path.relative_to(self.local).as_posix()
                if not _uploadable(relative):
                    continue
                try:
                    stat = path.stat()
                except FileNotFoundError:
                    continue
                found[relative] = (stat.st_size, stat.st_mtime_ns)
        changed = [r for r, sig in found.items() if self._seen.get(r) != sig]
        for relative in sorted(changed, key=lambda r: (_is_commit(r), r)):
            try:
                body = (self.local / relative).read_bytes()
            except FileNotFoundError:
                continue
            self._s3.put_object(Bucket=self.bucket, Key=f"{self.prefix}/{relative}", Body=body)
            self._seen[relative] = found[relative]
            self.uploads += 1
        for relative in [r for r in self._seen if r not in found]:
            self._s3.delete_object(Bucket=self.bucket, Key=f"{self.prefix}/{relative}")
            del self._seen[relative]
            self.deletes += 1

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)
        if self.error is not None:
            raise self.error
        self.sync()
