"""The daemon's serving processes: started, watched and restarted by the main process.

Python serves gRPC on about one core per process, so a daemon serves on several:
the main process (ingest, the one writer of the store, and a gRPC server) and
``serve.processes - 1`` serving processes, each its own interpreter started with
``python -m epochstate.daemon.server.serving_process`` (never forked: gRPC's state does
not survive a fork), each with its own gRPC server bound to the same TCP port
(``SO_REUSEPORT``: the kernel spreads new connections over the processes) and its own
secondary of the store. A serving process that exits (killed, crashed) is started
again; the others and their calls are not touched.
"""

from __future__ import annotations

import logging
import math
import os
import pickle
import struct
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from epochstate.core.errors import EpochStateError
from epochstate.daemon.config import DaemonSettings

log = logging.getLogger(__name__)

_LENGTH = struct.Struct(">I")

READY = "serving"
"""The line a serving process prints once it serves (anything else: it failed)."""


class ServingProcessFailed(EpochStateError):
    """A serving process did not start."""


def available_cpus(cgroup: Path = Path("/sys/fs/cgroup")) -> int:
    """The CPUs this process may use: its affinity, capped by its cgroup's CPU quota
    (cgroup v2 ``cpu.max``, v1 ``cpu.cfs_quota_us``/``cpu.cfs_period_us``), rounded up."""
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    quota: float | None = None
    try:
        limit, period = (cgroup / "cpu.max").read_text().split()[:2]
        if limit != "max":
            quota = int(limit) / int(period)
    except (OSError, ValueError):
        try:
            limit_us = int((cgroup / "cpu" / "cpu.cfs_quota_us").read_text())
            period_us = int((cgroup / "cpu" / "cpu.cfs_period_us").read_text())
            if limit_us > 0 and period_us > 0:
                quota = limit_us / period_us
        except (OSError, ValueError):
            pass
    if quota is not None:
        cpus = min(cpus, max(1, math.ceil(quota)))
    return max(1, cpus)


def serving_processes(settings: DaemonSettings) -> int:
    """How many processes serve gRPC, the main one included."""
    return settings.serve.processes or available_cpus()


@dataclass(frozen=True)
class ServingPlan:
    """What a serving process needs: the daemon's settings, which one it is, the TCP port
    to share, and the directory of the daemon's internal sockets."""

    settings: DaemonSettings
    index: int
    port: int
    directory: Path

    @property
    def internal(self) -> str:
        return f"unix://{internal_socket(self.directory)}"

    @property
    def private(self) -> Path:
        return private_socket(self.directory, self.index)


# The bytes a Unix socket's path may have (sun_path, less its terminating NUL).
_SOCKET_PATH_BYTES = 107


def serving_dir(settings: DaemonSettings) -> Path:
    """Where the daemon's processes keep their sockets and secondaries, only the daemon's
    user may enter: ``data_dir/serving``, or a new directory under the system's temporary
    one when that path is too long for the sockets in it."""
    directory = (settings.data_dir / "serving").absolute()
    if len(os.fsencode(private_socket(directory, 9999))) > _SOCKET_PATH_BYTES:
        return Path(tempfile.mkdtemp(prefix="epochstate-serving-"))
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    directory.chmod(0o700)  # the internal socket answers without checking callers
    return directory


def internal_socket(directory: Path) -> Path:
    """Where the main process answers what the serving processes forward (unchecked)."""
    return directory / "internal.sock"


def calls_file(directory: Path) -> Path:
    """Where the daemon's processes count their calls in flight (:mod:`shared_limits`)."""
    return directory / "calls"


def private_socket(directory: Path, index: int) -> Path:
    """The Unix socket serving process ``index`` answers reads on for the daemon itself (its
    metrics) and for tests."""
    return directory / f"{index}.sock"


class ServingProcesses:
    """``count`` serving processes sharing ``port``; restarted when they exit, until :meth:`stop`.
    ``exited(index)`` runs when process ``index`` has exited, before it starts again."""

    def __init__(
        self,
        settings: DaemonSettings,
        count: int,
        port: int,
        directory: Path,
        exited: Callable[[int], None] = lambda index: None,
    ) -> None:
        self._settings = settings
        self._exited = exited
        self._port = port
        self.directory = directory
        self._processes: dict[int, subprocess.Popen[bytes]] = {}
        self._stopping = threading.Event()
        self._lock = threading.Lock()
        self._watchers: list[threading.Thread] = []
        self.count = count
        self.restarts = 0

    def start(self, timeout: float = 60.0) -> None:
        """Start every process and return once each serves.

        Raises:
            ServingProcessFailed: one did not start (it said why on its standard error).
        """
        for index in range(1, self.count + 1):
            self._spawn(index, timeout)
        for index in range(1, self.count + 1):
            watcher = threading.Thread(
                target=self._watch, args=(index,), name=f"serving-{index}", daemon=True
            )
            watcher.start()
            self._watchers.append(watcher)

    def _spawn(self, index: int, timeout: float) -> None:
        plan = ServingPlan(self._settings, index, self._port, self.directory)
        process = subprocess.Popen(
            [sys.executable, "-m", "epochstate.daemon.server.serving_process"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
        )
        assert process.stdin is not None and process.stdout is not None
        # The plan, then the pipe stays open: a serving process stops when it closes, so
        # none outlives the main process, however that ends (a SIGKILL included).
        data = pickle.dumps(plan)
        process.stdin.write(_LENGTH.pack(len(data)) + data)
        process.stdin.flush()
        ready = _read_line(process, timeout)
        if ready != READY:
            process.kill()
            process.wait()
            raise ServingProcessFailed(f"serving process {index} did not start ({ready or 'no answer'})")
        with self._lock:
            self._processes[index] = process
        log.info("serving process %d (pid %d) serves on port %d", index, process.pid, self._port)

    def _watch(self, index: int) -> None:
        while not self._stopping.is_set():
            with self._lock:
                process = self._processes[index]
            code = process.wait()
            if process.stdin is not None:
                process.stdin.close()
            if self._stopping.is_set():
                return
            self._exited(index)
            log.error(
                "serving process %d (pid %d) exited with %d; starting it again", index, process.pid, code
            )
            self.restarts += 1
            try:
                self._spawn(index, 60.0)
            except ServingProcessFailed as error:
                log.error("%s", error)
                if self._stopping.wait(1.0):
                    return

    def pids(self) -> dict[int, int]:
        """The process id of each serving process, by index."""
        with self._lock:
            return {index: process.pid for index, process in self._processes.items()}

    def stop(self, grace: float) -> None:
        """Stop every process: each drains its calls for up to ``grace`` seconds."""
        self._stopping.set()
        with self._lock:
            processes = list(self._processes.values())
        for process in processes:
            if process.poll() is None:
                process.terminate()
            if process.stdin is not None:
                process.stdin.close()
        for process in processes:
            try:
                process.wait(grace + 5)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        for watcher in self._watchers:
            watcher.join()


def read_plan(stream: BinaryIO) -> ServingPlan:
    """The plan the main process wrote on a serving process's standard input."""
    (length,) = _LENGTH.unpack(stream.read(_LENGTH.size))
    plan: ServingPlan = pickle.loads(stream.read(length))
    return plan


def _read_line(process: subprocess.Popen[bytes], timeout: float) -> str:
    """The first line ``process`` prints, within ``timeout`` seconds ("" if none)."""
    assert process.stdout is not None
    found: list[bytes] = []
    reader = threading.Thread(target=lambda: found.append(process.stdout.readline()), daemon=True)  # type: ignore[union-attr]
    reader.start()
    reader.join(timeout)
    return found[0].decode(errors="replace").strip() if found else ""
