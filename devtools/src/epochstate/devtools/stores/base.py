"""What every checkpoint store server for tests offers, and the pieces they share:
a free loopback port, a child process with its log, a cache outside the clone."""

from __future__ import annotations

import atexit
import fcntl
import os
import socket
import subprocess
import time
import uuid
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from types import TracebackType

from epochstate.devtools.errors import EmbeddedServerError

HOST = "127.0.0.1"


class StoreServerFailed(EmbeddedServerError):
    """A store server for tests could not be installed or started (the message says why)."""


class CheckpointStore(ABC):
    """A real storage server on loopback that a daemon can read checkpoints from.

    :attr:`env` is everything a client needs in its environment (endpoint,
    credentials), in the cloud's standard variables. A *bucket* is the unit a test
    gets to itself: an S3 or GCS bucket, an Azure container, an HDFS directory.
    """

    env: dict[str, str]
    #: Puts a mirror may have in flight at once (:meth:`put` is then called from that
    #: many threads): more than one for a store whose every write waits on the server.
    concurrent_puts: int = 1

    @abstractmethod
    def start(self) -> CheckpointStore:
        """Start the server (installing it first if needed); return once it answers."""

    @abstractmethod
    def stop(self) -> None:
        """Stop the server (idempotent)."""

    @abstractmethod
    def new_bucket(self) -> str:
        """A new, empty bucket."""

    @abstractmethod
    def uri(self, bucket: str, prefix: str) -> str:
        """The URI a user would give for ``prefix`` in ``bucket``."""

    @abstractmethod
    def put(self, bucket: str, key: str, body: bytes) -> None:
        """Write one whole file (an object written once, at close, as Hadoop's connectors do)."""

    @abstractmethod
    def delete(self, bucket: str, key: str) -> None:
        """Delete one file."""

    def __enter__(self) -> CheckpointStore:
        return self.start()

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


def bucket_name(prefix: str = "cp") -> str:
    """A bucket name every store accepts (lower case, 3-63 characters, no dots)."""
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind((HOST, 0))
        port: int = probe.getsockname()[1]
        return port


def cache_root() -> Path:
    """Where servers installed from a registry are kept between runs: outside the
    clone, shared by every checkout on the machine (``$EPOCHSTATE_CACHE`` or
    ``$XDG_CACHE_HOME/epochstate``)."""
    explicit = os.environ.get("EPOCHSTATE_CACHE")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "epochstate"


@contextmanager
def install_lock(target: Path) -> Iterator[None]:
    """Held while ``target`` is installed, so that parallel runs install it once."""
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target.parent / f".{target.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def run_step(
    args: Sequence[str],
    what: str,
    cwd: Path | None = None,
    timeout: float = 900,
    env: Mapping[str, str] | None = None,
) -> None:
    """Run one step (of an installation, say); its output goes into the error if it fails."""
    try:
        done = subprocess.run(
            args, cwd=cwd, capture_output=True, text=True, timeout=timeout, env={**os.environ, **(env or {})}
        )
    except (OSError, subprocess.TimeoutExpired) as error:
        raise StoreServerFailed(f"{what}: {' '.join(args)}: {error}") from None
    if done.returncode != 0:
        raise StoreServerFailed(f"{what}: {' '.join(args)} exited {done.returncode}:\n{done.stderr[-3000:]}")


# Servers still running when the interpreter exits are stopped, so that a failed
# test run does not leave servers holding ports.
_running: set[ServerProcess] = set()


@atexit.register
def _stop_leftovers() -> None:
    for server in list(_running):
        server.stop()


class ServerProcess:
    """One child process whose output goes to a log file, stopped with SIGTERM."""

    def __init__(self, name: str, args: Sequence[str], log: Path, env: Mapping[str, str] | None = None):
        self.name = name
        self.log = log
        log.parent.mkdir(parents=True, exist_ok=True)
        with log.open("ab") as out:
            try:
                self.process = subprocess.Popen(
                    list(args), stdout=out, stderr=subprocess.STDOUT, env={**os.environ, **(env or {})}
                )
            except OSError as error:
                raise StoreServerFailed(f"{name}: cannot run {args[0]}: {error}") from None
        _running.add(self)

    def wait_until(self, ready: Callable[[], bool], timeout: float) -> None:
        """Poll ``ready`` until it is true; fail with the log's tail if the process
        exits or ``timeout`` passes first."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise StoreServerFailed(f"{self.name} exited {self.process.returncode}:\n{self.tail()}")
            try:
                if ready():
                    return
            except OSError:
                pass
            time.sleep(0.1)
        self.stop()
        raise StoreServerFailed(f"{self.name} not ready within {timeout:.0f}s:\n{self.tail()}")

    def tail(self, size: int = 3000) -> str:
        try:
            return self.log.read_text(errors="replace")[-size:]
        except OSError:
            return ""

    def stop(self) -> None:
        _running.discard(self)
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def listening(port: int) -> Callable[[], bool]:
    def probe() -> bool:
        with socket.create_connection((HOST, port), timeout=0.5):
            return True

    return probe
