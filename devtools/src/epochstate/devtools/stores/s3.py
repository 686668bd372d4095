"""S3: moto's server mode, a real S3-protocol server on loopback (the dev extra's
``moto[server]``); clients reach it through ``AWS_ENDPOINT_URL``."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from epochstate.devtools.stores.base import (
    HOST,
    CheckpointStore,
    ServerProcess,
    bucket_name,
    free_port,
    listening,
)

REGION = "us-east-1"


class S3Server(CheckpointStore):
    """One ``moto_server`` process; :attr:`env` is what a client needs to reach it."""

    def __init__(self, workdir: Path, env: dict[str, str] | None = None) -> None:
        self.workdir = workdir
        self.port = free_port()
        self.endpoint = f"http://{HOST}:{self.port}"
        self.env = {
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_ACCESS_KEY_ID": "epochstate-test",
            "AWS_SECRET_ACCESS_KEY": "epochstate-test-secret",
            "AWS_DEFAULT_REGION": REGION,
            "AWS_EC2_METADATA_DISABLED": "true",
            **(env or {}),
        }
        self.process: ServerProcess | None = None
        self._client: Any = None

    def start(self, timeout: float = 30.0) -> S3Server:
        self.process = ServerProcess(
            "moto_server",
            [sys.executable, "-m", "moto.server", "-H", HOST, "-p", str(self.port)],
            self.workdir / "moto.log",
        )
        self.process.wait_until(listening(self.port), timeout)
        return self

    def stop(self) -> None:
        if self.process is not None:
            self.process.stop()

    def client(self) -> Any:
        import boto3

        return boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            region_name=REGION,
            aws_access_key_id=self.env["AWS_ACCESS_KEY_ID"],
            aws_secret_access_key=self.env["AWS_SECRET_ACCESS_KEY"],
        )

    def _writer(self) -> Any:
        if self._client is None:
            self._client = self.client()
        return self._client

    def new_bucket(self) -> str:
        name = bucket_name()
        self.client().create_bucket(Bucket=name)
        return name

    def uri(self, bucket: str, prefix: str) -> str:
        return f"s3://{bucket}/{prefix.strip('/')}"

    def put(self, bucket: str, key: str, body: bytes) -> None:
        self._writer().put_object(Bucket=bucket, Key=key, Body=body)

    def delete(self, bucket: str, key: str) -> None:
        self._writer().delete_object(Bucket=bucket, Key=key)
