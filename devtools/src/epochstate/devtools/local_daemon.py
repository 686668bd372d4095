"""A daemon as a child process (``epochstate daemon``), for the demo, benchmarks and tests.

It starts the real daemon on loopback (a random port unless ``listen`` names one)
and on its Unix socket in the data directory (in a short directory of its own under
the system's temporary one when that path would be too long for a Unix socket),
waits until it serves, and can kill (SIGKILL, a crash) and restart it with the
same data directory.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from epochstate.client.client import EpochStateClient
from epochstate.client.tls import TlsOptions

# The bytes a Unix socket's path may have (sun_path, less its terminating NUL).
_SOCKET_PATH_BYTES = 107


class LocalDaemon:
    """Starts, kills and restarts one daemon process with a fixed data directory."""

    def __init__(
        self,
        data_dir: Path,
        jobs: dict[str, str],
        zookeeper: str | None = None,
        extra_args: list[str] | None = None,
        env: dict[str, str] | None = None,
        listen: str = "127.0.0.1:0",
        log_path: Path | None = None,
        tls: TlsOptions | None = None,
        prefix: list[str] | None = None,
        serve_processes: int = 1,
    ) -> None:
        self.listen = listen
        # One serving process unless asked (the daemon's default is one per CPU): most
        # tests are about one process, and a second one per daemon would cost the suite.
        self.serve_processes = serve_processes
        # A command the daemon runs under (``ip netns exec NS``: in a test's network namespace).
        self.prefix = prefix or []
        self.data_dir = data_dir
        self.jobs = jobs
        self.zookeeper = zookeeper
        self.extra_args = extra_args or []
        self.env = env or {}
        self.process: subprocess.Popen[bytes] | None = None
        self._target = ""  # TCP host:port
        self._unix_target = ""  # unix:///path of its Unix socket ("" when it has none)
        self._starting: tuple[Path, float, float] | None = None  # (address file, deadline, timeout)
        self.log_path = log_path or data_dir / "daemon.log"  # appended to by every start
        self.tls = tls or TlsOptions()  # what :meth:`client` connects with
        self._socket_dir: Path | None = None  # see _short_socket

    def start(self, timeout: float = 30.0, wait: bool = True) -> LocalDaemon:
        """Start the daemon; with ``wait``, return once it serves (RuntimeError if it exits
        first or does not serve within ``timeout`` seconds). Without ``wait``, return at
        once: the first use of :attr:`target`, :attr:`unix_target`, :meth:`client` or
        :meth:`ready` waits for it, within ``timeout`` of the start, so the caller can do
        other work (run its Spark batches) while the daemon starts."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        address_file = self.data_dir / "address"
        address_file.unlink(missing_ok=True)
        args = [
            *self.prefix,
            sys.executable,
            "-m",
            "epochstate.cli.app",
            "daemon",
            "--listen",
            self.listen,
            "--data-dir",
            str(self.data_dir),
            "--address-file",
            str(address_file),
            *self._short_socket(),
            *self._serving(),
            *self.extra_args,
        ]
        for name, checkpoint in self.jobs.items():
            args += ["--job", f"{name}={checkpoint}"]
        if self.zookeeper:
            args += ["--zookeeper", self.zookeeper]
        log = self.log_path.open("ab")
        self._target = self._unix_target = ""
        self.process = subprocess.Popen(
            args, stdout=log, stderr=subprocess.STDOUT, env={**os.environ, **self.env}
        )
        self._starting = (address_file, time.monotonic() + timeout, timeout)
        if wait:
            self.ready()
        return self

    def ready(self) -> LocalDaemon:
        """Wait until the daemon started last serves (at once if it does already)."""
        if self._starting is None:
            return self
        address_file, deadline, timeout = self._starting
        assert self.process is not None
        while not address_file.exists():
            if self.process.poll() is not None:
                self._starting = None
                raise RuntimeError(f"daemon exited with {self.process.returncode}:\n{self.log_tail()}")
            if time.monotonic() > deadline:
                self._starting = None
                self.kill()
                raise RuntimeError(f"daemon did not start within {timeout}s:\n{self.log_tail()}")
            time.sleep(0.05)
        targets = address_file.read_text().split()
        self._target = targets[0]
        self._unix_target = next((t for t in targets[1:] if t.startswith("unix:")), "")
        self._starting = None
        return self

    @property
    def target(self) -> str:
        """Its TCP ``host:port`` (waits for a daemon still starting, see :meth:`start`)."""
        return self.ready()._target

    @property
    def unix_target(self) -> str:
        """``unix:///path`` of its Unix socket, "" when it has none (waits like :attr:`target`)."""
        return self.ready()._unix_target

    def _serving(self) -> list[str]:
        """``--serve-processes`` unless the arguments or the environment set it."""
        if "--serve-processes" in self.extra_args or "EPOCHSTATE_SERVE__PROCESSES" in {
            **os.environ,
            **self.env,
        }:
            return []
        return ["--serve-processes", str(self.serve_processes)]

    def _short_socket(self) -> list[str]:
        """``--listen-unix`` to a short path when the default (in the data directory)
        is too long for a Unix socket and nothing else chose one; else nothing."""
        chosen = "--listen-unix" in self.extra_args or "EPOCHSTATE_LISTEN_UNIX" in {**os.environ, **self.env}
        default = self.data_dir.absolute() / "epochstate.sock"
        if chosen or len(os.fsencode(default)) <= _SOCKET_PATH_BYTES:
            return []
        if self._socket_dir is None:
            self._socket_dir = Path(tempfile.mkdtemp(prefix="epochstate-"))
        return ["--listen-unix", str(self._socket_dir / "epochstate.sock")]

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def client(self, timeout: float = 10.0) -> EpochStateClient:
        return EpochStateClient(self.target, timeout=timeout, tls=self.tls)

    def kill(self) -> None:
        """SIGKILL: no shutdown hooks run (crash simulation)."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(10)

    def terminate(self) -> None:
        """SIGTERM without waiting: daemons told first shut down side by side, then
        :meth:`stop` waits for each."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)

    def stop(self) -> int:
        if self.process is None:
            return 0
        if self.process.poll() is None:
            self.terminate()
            try:
                self.process.wait(20)
            except subprocess.TimeoutExpired:
                self.kill()
        return self.process.returncode

    def wait_for_epoch(self, job: str, epoch: int, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        with self.client() as client:
            while time.monotonic() < deadline:
                found = {j.job: j.latest_epoch for j in client.jobs()}
                if found.get(job, -1) >= epoch:
                    return
                time.sleep(0.05)
        raise AssertionError(f"job {job} did not reach epoch {epoch} within {timeout}s:\n{self.log_tail()}")
