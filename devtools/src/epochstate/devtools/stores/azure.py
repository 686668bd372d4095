"""Azure Blob Storage: Azurite, Microsoft's emulator, from npm (``npm install``
into :func:`~epochstate.devtools.stores.base.cache_root`, once per machine; needs
Node.js). Only its Blob service runs: adlfs reads through the Blob API.

The account is one of Azurite's own (``AZURITE_ACCOUNTS``), with a key the server
checks on every request (Shared Key signatures), so a wrong key is refused as in
Azure. Clients reach it through the standard ``AZURE_STORAGE_CONNECTION_STRING``.
Azurite has no Data Lake (``dfs``) endpoint: no hierarchical namespace.
"""

from __future__ import annotations

import base64
import shutil
from pathlib import Path
from typing import Any

from epochstate.devtools.stores.base import (
    HOST,
    CheckpointStore,
    ServerProcess,
    StoreServerFailed,
    bucket_name,
    cache_root,
    free_port,
    install_lock,
    listening,
    run_step,
)

# The newest release that runs on Node 20 (3.36 and later need Node 22).
AZURITE_VERSION = "3.35.0"
ACCOUNT = "epochstatecp"
DEFAULT_KEY = base64.b64encode(b"epochstate-test-account-key-0123456789").decode()


def azurite_executable(version: str = AZURITE_VERSION) -> Path:
    """``azurite-blob`` of ``version``, installed from npm into the cache on first use.

    Raises:
        StoreServerFailed: no npm, or the installation failed.
    """
    home = cache_root() / f"azurite-{version}"
    executable = home / "node_modules" / ".bin" / "azurite-blob"
    if executable.exists():
        return executable
    npm = shutil.which("npm")
    if npm is None:
        raise StoreServerFailed("Azurite needs Node.js and npm (apt-get install nodejs npm)")
    with install_lock(home):
        if not executable.exists():
            home.mkdir(parents=True, exist_ok=True)
            run_step(
                [
                    npm,
                    "install",
                    "--no-audit",
                    "--no-fund",
                    "--loglevel=error",
                    "--prefix",
                    str(home),
                    f"azurite@{version}",
                ],
                "installing Azurite",
            )
    if not executable.exists():
        raise StoreServerFailed(f"npm installed Azurite but {executable} is missing")
    return executable


def connection_string(account: str, key: str, endpoint: str) -> str:
    return (
        f"DefaultEndpointsProtocol=http;AccountName={account};AccountKey={key};"
        f"BlobEndpoint={endpoint}/{account};"
    )


class AzuriteServer(CheckpointStore):
    """One Azurite Blob service process, data in memory, telemetry off.

    ``key`` is the account's key (base64, as Azure's are); :attr:`env` connects with it.
    """

    def __init__(self, workdir: Path, key: str = DEFAULT_KEY, env: dict[str, str] | None = None) -> None:
        self.workdir = workdir
        self.key = key
        self.port = free_port()
        self.endpoint = f"http://{HOST}:{self.port}"
        self.env = {
            "AZURE_STORAGE_CONNECTION_STRING": connection_string(ACCOUNT, key, self.endpoint),
            **(env or {}),
        }
        self.process: ServerProcess | None = None
        self._fs: Any = None

    def start(self, timeout: float = 60.0) -> AzuriteServer:
        executable = azurite_executable()
        self.process = ServerProcess(
            "azurite-blob",
            [
                str(executable),
                "--blobHost",
                HOST,
                "--blobPort",
                str(self.port),
                "--inMemoryPersistence",
                "--disableTelemetry",
                "--skipApiVersionCheck",
                "--loose",
                "--silent",
            ],
            self.workdir / "azurite.log",
            env={"AZURITE_ACCOUNTS": f"{ACCOUNT}:{self.key}"},
        )
        self.process.wait_until(listening(self.port), timeout)
        return self

    def stop(self) -> None:
        if self.process is not None:
            self.process.stop()

    def writer(self) -> Any:
        if self._fs is None:
            from adlfs import AzureBlobFileSystem

            self._fs = AzureBlobFileSystem(
                connection_string=self.env["AZURE_STORAGE_CONNECTION_STRING"], skip_instance_cache=True
            )
        return self._fs

    def new_bucket(self) -> str:
        name = bucket_name()
        self.writer().mkdir(name)
        return name

    def uri(self, bucket: str, prefix: str, scheme: str = "abfss") -> str:
        return f"{scheme}://{bucket}@{ACCOUNT}.dfs.core.windows.net/{prefix.strip('/')}"

    def put(self, bucket: str, key: str, body: bytes) -> None:
        self.writer().pipe_file(f"{bucket}/{key}", body)

    def delete(self, bucket: str, key: str) -> None:
        self.writer().rm_file(f"{bucket}/{key}")
