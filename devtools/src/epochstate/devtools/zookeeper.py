"""A real, single-node ZooKeeper server as a Java subprocess, for development and tests.

It runs ``org.apache.zookeeper.server.ZooKeeperServerMain`` from the jars that the
pyspark wheel ships, on loopback only. Everything it writes (``zoo.cfg``, the
logging configuration, the server log, the snapshots and transaction logs) stays
in one data directory, so a restart with the same directory keeps every znode and
every session that has not expired yet.
"""

from __future__ import annotations

import atexit
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from typing import IO

from epochstate.devtools.classpath import find_java, zookeeper_classpath
from epochstate.devtools.errors import ZooKeeperStartFailed
from epochstate.devtools.jvm_options import SMALL_JVM_OPTIONS

HOST = "127.0.0.1"
MAIN_CLASS = "org.apache.zookeeper.server.ZooKeeperServerMain"
# A small heap and the client compiler only: this server is for development and
# tests, where start time matters more than peak throughput.
DEFAULT_JVM_OPTIONS = ("-Xmx256m", *SMALL_JVM_OPTIONS)

_LOG4J2_PROPERTIES = """\
status = warn
appender.out.type = Console
appender.out.name = out
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = %d{ISO8601} %-5p [%t] %c{1}: %m%n
rootLogger.level = info
rootLogger.appenderRef.out.ref = out
logger.probes.name = org.apache.zookeeper.server.NIOServerCnxn
logger.probes.level = warn
"""

# Servers still running when the interpreter exits are killed, so a failed test run
# does not leave JVMs holding ports.
_running: set[EmbeddedZooKeeper] = set()


@atexit.register
def _kill_leftovers() -> None:
    for server in list(_running):
        server.kill()


class EmbeddedZooKeeper:
    """One standalone ZooKeeper server process on ``127.0.0.1``.

    Unless ``port`` is given, a free port is chosen on first use (and chosen again
    if it is taken by the time the server first binds it); once served on, it is
    kept by :meth:`restart`, so clients reconnect to the same address.
    Use as a context manager or call :meth:`start` and :meth:`stop`.

    Raises (from :meth:`start`):
        JavaNotFound: no java executable.
        ZooKeeperJarsNotFound: no ZooKeeper jars.
        ZooKeeperStartFailed: the server exited or did not serve within
            ``start_timeout``; the message carries the tail of its log.
    """

    def __init__(
        self,
        data_dir: str | Path,
        port: int | None = None,
        *,
        classpath: str | None = None,
        java: str | None = None,
        tick_time_ms: int = 500,
        max_session_timeout_ms: int = 120_000,
        force_sync: bool = False,
        jvm_options: Sequence[str] = DEFAULT_JVM_OPTIONS,
        start_timeout: float = 60.0,
        stop_grace: float = 10.0,
        log_path: str | Path | None = None,
        host: str = HOST,
    ) -> None:
        self.data_dir = Path(data_dir).resolve()
        # The address it listens on: loopback unless a test gives one of its own network namespace's.
        self.host = host
        self._log_path = Path(log_path).resolve() if log_path else self.data_dir / "zookeeper.log"
        self._port = port
        # A given port, or one the server has served on, is kept: clients know it.
        self._port_fixed = port is not None
        self._classpath = classpath
        self._java = java
        self.tick_time_ms = tick_time_ms
        self.max_session_timeout_ms = max_session_timeout_ms
        # fsync only guards against machine crashes; killed processes lose nothing.
        self.force_sync = force_sync
        self.jvm_options = tuple(jvm_options)
        self.start_timeout = start_timeout
        self.stop_grace = stop_grace
        self._process: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None
        self._log_start = 0
        # Set by stop()/kill() so that a start() waiting in another thread gives up.
        self._stopping = threading.Event()

    @property
    def port(self) -> int:
        """The client port; chosen on first use when none was given."""
        if self._port is None:
            self._port = _free_port(self.host)
        return self._port

    @property
    def connect_string(self) -> str:
        """``host:port`` for a ZooKeeper client (append a chroot path if needed)."""
        return f"{self.host}:{self.port}"

    @property
    def log_path(self) -> Path:
        """The server's log (``zookeeper.log`` in the data directory unless given); appended to."""
        return self._log_path

    @property
    def config_path(self) -> Path:
        return self.data_dir / "zoo.cfg"

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    @property
    def pid(self) -> int | None:
        return self._process.pid if self.running and self._process else None

    def start(self) -> EmbeddedZooKeeper:
        """Start the server and return once it serves requests."""
        if self.running:
            return self
        self._stopping.clear()
        java = find_java(self._java)
        classpath = zookeeper_classpath(self._classpath)
        attempts = 1 if self._port_fixed else 3
        for attempt in range(attempts):
            try:
                self._launch(java, classpath)
                self._port_fixed = True
                return self
            except ZooKeeperStartFailed as failure:
                # A free port can be taken between choosing and binding it.
                if attempt + 1 == attempts or "Address already in use" not in str(failure):
                    raise
                self._port = None
        raise AssertionError("unreachable")

    def stop(self) -> None:
        """Stop the server: SIGTERM, then SIGKILL after ``stop_grace`` seconds."""
        self._stopping.set()
        process = self._process
        if process is not None and process.poll() is None:
            process.terminate()
            try:
                process.wait(self.stop_grace)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        self._finish()

    def kill(self) -> None:
        """SIGKILL the server, as a crash would (for fault tests)."""
        self._stopping.set()
        process = self._process
        if process is not None and process.poll() is None:
            process.send_signal(signal.SIGKILL)
            process.wait()
        self._finish()

    def wait(self, timeout: float | None = None) -> int | None:
        """Wait for the server process to exit; its exit code, or None on timeout."""
        if self._process is None:
            return None
        try:
            return self._process.wait(timeout)
        except subprocess.TimeoutExpired:
            return None

    def restart(self) -> EmbeddedZooKeeper:
        """Stop (if running) and start again on the same port and data directory."""
        self.stop()
        return self.start()

    def log_tail(self, max_bytes: int = 4000) -> str:
        """The end of what the current (or last) server process logged."""
        try:
            with self.log_path.open("rb") as log:
                log.seek(0, 2)
                start = max(self._log_start, log.tell() - max_bytes)
                log.seek(start)
                return log.read().decode("utf-8", "replace")
        except OSError:
            return ""

    def __enter__(self) -> EmbeddedZooKeeper:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def __repr__(self) -> str:
        state = "running" if self.running else "stopped"
        return f"EmbeddedZooKeeper({self.connect_string}, {self.data_dir}, {state})"

    def _launch(self, java: str, classpath: str) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self._write_config()
        log4j_config = self.data_dir / "log4j2.properties"
        log4j_config.write_text(_LOG4J2_PROPERTIES)
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = self.log_path.open("ab")
        self._log_start = self._log.tell()
        command = [
            java,
            *self.jvm_options,
            f"-Dlog4j2.configurationFile={log4j_config}",
            "-Dzookeeper.jmx.log4j.disable=true",
            "-cp",
            classpath,
            MAIN_CLASS,
            str(self.config_path),
        ]
        try:
            self._process = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=self._log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        except OSError as error:
            self._finish()
            raise ZooKeeperStartFailed(f"cannot run {java}: {error}") from error
        _running.add(self)
        self._wait_serving()

    def _write_config(self) -> None:
        lines = {
            "tickTime": self.tick_time_ms,
            "dataDir": self.data_dir,
            "clientPort": self.port,
            "clientPortAddress": self.host,
            "maxClientCnxns": 0,
            "maxSessionTimeout": self.max_session_timeout_ms,
            "admin.enableServer": "false",
            "4lw.commands.whitelist": "ruok,srvr,mntr,wchs",
            "forceSync": "yes" if self.force_sync else "no",
            # Keep the data directory bounded for long-running development servers.
            "autopurge.snapRetainCount": 3,
            "autopurge.purgeInterval": 1,
        }
        text = "".join(f"{key}={value}\n" for key, value in lines.items())
        self.config_path.write_text(text)

    def _wait_serving(self) -> None:
        process = self._process
        assert process is not None
        deadline = time.monotonic() + self.start_timeout
        while True:
            if process.poll() is not None:
                self._finish()
                raise ZooKeeperStartFailed(
                    f"ZooKeeper exited with code {process.returncode} while starting "
                    f"on {self.connect_string}; log {self.log_path}:\n{self.log_tail()}"
                )
            if _is_serving(self.port, self.host):
                return
            if time.monotonic() > deadline:
                self.kill()
                raise ZooKeeperStartFailed(
                    f"ZooKeeper did not serve on {self.connect_string} within "
                    f"{self.start_timeout}s; log {self.log_path}:\n{self.log_tail()}"
                )
            if self._stopping.wait(0.05):
                raise ZooKeeperStartFailed(f"stopped while starting on {self.connect_string}")

    def _finish(self) -> None:
        _running.discard(self)
        if self._log is not None:
            self._log.close()
            self._log = None


def four_letter_word(port: int, word: str, timeout: float = 1.0, host: str = HOST) -> str:
    """Send a whitelisted four-letter command (``ruok``, ``srvr``, ``mntr``, ``wchs``)."""
    with socket.create_connection((host, port), timeout=timeout) as sock:
        sock.sendall(word.encode("ascii"))
        chunks = []
        while chunk := sock.recv(4096):
            chunks.append(chunk)
    return b"".join(chunks).decode("utf-8", "replace")


def _is_serving(port: int, host: str = HOST) -> bool:
    # 'srvr' answers "Mode: standalone" only once the server accepts sessions.
    try:
        return "Mode:" in four_letter_word(port, "srvr", host=host)
    except OSError:
        return False


def _free_port(host: str = HOST) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        port: int = sock.getsockname()[1]
        return port


def run_forever(port: int, data_dir: str | Path) -> int:
    """Serve ZooKeeper until SIGINT or SIGTERM (exit code 0) or until the server dies.

    For the ``epochstate zookeeper`` command. Prints the connect string once serving;
    if the server process exits by itself, prints its log tail to stderr and returns
    its exit code. Must run in the main thread (it installs signal handlers).
    """
    server = EmbeddedZooKeeper(data_dir, port)
    stop = threading.Event()
    previous = {
        signum: signal.signal(signum, lambda *_: stop.set()) for signum in (signal.SIGINT, signal.SIGTERM)
    }
    try:
        server.start()
        print(f"ZooKeeper serving on {server.connect_string} (data {server.data_dir})", flush=True)

        def watch_exit() -> None:
            server.wait()
            stop.set()

        threading.Thread(target=watch_exit, name="zookeeper-exit", daemon=True).start()
        stop.wait()
        if not server.running:
            code = server.wait() or 1
            print(f"ZooKeeper exited with code {code}:\n{server.log_tail()}", file=sys.stderr)
            return code
        server.stop()
        return 0
    finally:
        server.kill()
        for signum, handler in previous.items():
            signal.signal(signum, handler)
