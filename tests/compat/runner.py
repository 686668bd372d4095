"""Runs the workload in a release's own interpreter, once per test session per release.

For each release: its venv (``venvs``; the pin runs in this interpreter), a daemon
that knows no job and looks at checkpoints only once a minute (so only the
listener's reports can make it follow a job and see its epochs), a fresh
ZooKeeper chroot and, for releases with Python data sources, a two-partition
topic. The workload reports to that daemon; once it is done, what the daemon
followed and registered in ZooKeeper is recorded and the daemon stops. Stores the
release's own reader could not read are then read by the pin's reader, in this
test session's SparkSession.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterable
from concurrent.futures import Future
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from epochstate.core.zookeeper.layout import Layout, parse_epoch_name
from epochstate.devtools import local_filesystem, python_workers
from epochstate.devtools.local_daemon import LocalDaemon
from epochstate.devtools.zookeeper import EmbeddedZooKeeper
from tests.compat.releases import READER_OF_LAST_RESORT, SparkRelease
from tests.compat.venvs import VenvUnavailable, ensure_venv
from tests.compat.workload.oracle import dump_job, unread
from tests.distributions import ROOT, members
from tests.fixtures.kafka import KafkaBroker
from tests.fixtures.zookeeper import new_test_client

WORKLOAD = "epochstate_compat_workload"
WORKLOAD_TIMEOUT = 1500.0
SPARK_CONF_ENV = "EPOCHSTATE_COMPAT_SPARK_CONF"  # more settings of the workload's session, as JSON
# How long the listener's daemon may take, after the workload ended, to have
# ingested every job's newest epoch (its own look at checkpoints is a minute away).
PUSH_SETTLE_SECONDS = 15.0

Say = Callable[[str], None]


def release_path(directory: Path) -> str:
    """The ``PYTHONPATH`` of a release's workload: this clone's distributions' src folders
    and ``directory``, which holds the workload as ``epochstate_compat_workload``."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / WORKLOAD).symlink_to(ROOT / "tests" / "compat" / "workload", target_is_directory=True)
    return os.pathsep.join([str(directory), *(str(d.src) for d in members())])


@dataclass(frozen=True)
class StoreDump:
    """What a Spark reader said about one store at each committed epoch."""

    job: str
    operator_id: int
    store: str
    kind: str
    epochs: dict[int, list[Any]]  # epoch -> [key, value, partition] (``workload.values`` form)
    reader: str  # the pyspark version whose reader read it
    own_error: str | None  # why the release's own reader could not, if it could not


@dataclass
class ReleaseRun:
    """One release's workload run, as the tests check it."""

    release: SparkRelease
    out: Path
    log: Path
    result: dict[str, Any] = field(default_factory=dict)
    failure: str | None = None  # why the workload did not finish
    stores: list[StoreDump] = field(default_factory=list)
    unreadable: dict[str, str] = field(default_factory=dict)  # "job operator/store" -> errors
    followed: dict[str, int] = field(
        default_factory=dict
    )  # job -> newest epoch the listener's daemon ingested
    registered: dict[str, list[int]] = field(default_factory=dict)  # job -> epochs registered in ZooKeeper
    zookeeper: str = ""  # the chroot's connect string (the chain's subjects are there)

    @property
    def jobs(self) -> dict[str, Any]:
        jobs: dict[str, Any] = self.result.get("jobs", {})
        return jobs

    def log_tail(self, lines: int = 60) -> str:
        text = self.log.read_text(errors="replace") if self.log.exists() else ""
        return "\n".join(text.splitlines()[-lines:])

    def require(self) -> None:
        """Fail with the workload's own words when it did not finish."""
        assert self.failure is None, f"{self.release}: {self.failure}\n{self.log_tail()}"


def _environment(python: Path, path: str) -> dict[str, str]:
    # Nothing of this session's Spark may leak into another release's driver.
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SPARK_", "PYSPARK_", "PY4J"))}
    env.update(
        PYTHONPATH=path,
        PYSPARK_PYTHON=python_workers.launcher(str(python)),  # the release's pyspark is pip-installed
        PYSPARK_DRIVER_PYTHON=str(python),
        TZ="UTC",
        SPARK_LOCAL_IP="127.0.0.1",
    )
    return env


class ReleaseRunner:
    """Runs each release's workload on first request, or ahead of it in the background
    (:meth:`prefetch`), and keeps the outcome for the session."""

    def __init__(
        self, base: Path, path: str, spark: Any, zookeeper: EmbeddedZooKeeper, broker: KafkaBroker, say: Say
    ) -> None:
        """``spark``: this session's SparkSession, of the pin, whose reader is the last resort."""
        import pyspark

        assert pyspark.__version__ == READER_OF_LAST_RESORT.pyspark, "the test session runs the pin"
        self.base, self.path, self.spark, self.zookeeper = base, path, spark, zookeeper
        self.broker, self.say = broker, say
        self._runs: dict[str, ReleaseRun] = {}
        self._ahead: dict[str, Future[tuple[ReleaseRun, list[str]]]] = {}
        self._closing = threading.Event()

    def prefetch(self, releases: Iterable[SparkRelease]) -> None:
        """Run the workloads of ``releases`` one after another in a background thread
        from now on: they run in processes of their own, and the rest of the test session,
        which mostly waits on processes, hides them. :meth:`get` waits for a release's
        run, then prints what it said and reads, with this session's Spark, what the
        release's own reader could not."""
        wanted = [r for r in releases if r.name not in self._runs and r.name not in self._ahead]
        for release in wanted:
            self._ahead[release.name] = Future()

        def work() -> None:
            for release in wanted:
                future = self._ahead[release.name]
                if self._closing.is_set() or not future.set_running_or_notify_cancel():
                    continue
                said: list[str] = []
                try:
                    future.set_result((self._workload(release, said.append), said))
                except BaseException as error:  # the test that gets the release raises it
                    future.set_exception(error)

        threading.Thread(target=work, name="compat-workloads", daemon=True).start()

    def close(self) -> None:
        """Start no more workloads in the background; wait for the one running, whose
        daemon and Spark would otherwise outlive the session's servers."""
        self._closing.set()
        for future in self._ahead.values():
            if not future.cancel():
                with suppress(BaseException):
                    future.result(timeout=WORKLOAD_TIMEOUT)

    def get(self, release: SparkRelease) -> ReleaseRun:
        if release.name not in self._runs:
            ahead = self._ahead.pop(release.name, None)
            if ahead is None or ahead.cancelled():
                run = self._workload(release, self.say)
            else:
                waited = time.monotonic()
                run, said = ahead.result()
                for line in said:
                    self.say(line)
                self.say(
                    f"{release}: run ahead in the background; waited {time.monotonic() - waited:.0f} s for it"
                )
            if run.failure is None:
                self._collect_oracle(run)
            self._runs[release.name] = run
        return self._runs[release.name]

    def _python(self, release: SparkRelease, say: Say) -> Path:
        return Path(sys.executable) if release.pinned else ensure_venv(release, say).python

    def _local_filesystem(self, release: SparkRelease, python: Path, say: Say) -> dict[str, str]:
        """The Spark settings of :mod:`epochstate.devtools.local_filesystem` for the release's
        driver, its jar compiled against the release's Hadoop once per venv; none if it
        cannot be (the workload then forks ``chmod`` and ``readlink`` as Hadoop does)."""
        if release.pinned:
            return local_filesystem.spark_conf()
        venv = python.parent.parent
        jar = venv / f"{local_filesystem.JAR_PREFIX}{local_filesystem.sources_digest()}.jar"
        if not jar.is_file():
            try:
                jars = next(venv.glob("lib/python*/site-packages/pyspark/jars"))
                local_filesystem.build(jar, jars)
            except (StopIteration, OSError) as error:
                say(f"{release}: Hadoop's own local file system: {error!r}")
                return {}
        return local_filesystem.spark_conf(jar)

    def _workload(self, release: SparkRelease, say: Say) -> ReleaseRun:
        """The release's workload run and what its daemon and ZooKeeper saw of it (all
        in processes of their own: safe in a background thread)."""
        out = self.base / release.name
        run = ReleaseRun(release, out, self.base / f"{release.name}.log")
        try:
            python = self._python(release, say)
        except VenvUnavailable as error:  # every test of the release fails with pip's words, once made
            run.failure = str(error)
            return run
        run.zookeeper = self._chroot()
        daemon = LocalDaemon(
            out.with_name(f"{release.name}-listener-daemon"),
            {},
            zookeeper=run.zookeeper,
            extra_args=["--poll-interval", "60"],
        ).start()
        try:
            command = [str(python), "-P", "-m", WORKLOAD, "run", "--out", str(out)]
            command += ["--report-to", daemon.target]
            if release.features.python_data_source:
                topic = self.broker.create_topic(f"compat-{release.series}-{uuid.uuid4().hex[:8]}", 2)
                command += ["--bootstrap", self.broker.bootstrap, "--zookeeper", run.zookeeper]
                command += ["--topic", topic]
            conf = self._local_filesystem(release, python, say)
            started = time.monotonic()
            say(f"{release}: running the workload with pyspark {release.pyspark} (log: {run.log})")
            if self._execute(command, python, run.log, conf):
                run.result = json.loads((out / "result.json").read_text())
                say(f"{release}: workload done in {time.monotonic() - started:.0f} s {run.result['timings']}")
            else:
                run.failure = f"the workload failed (see {run.log})"
                return run
            self._observe(run, daemon)
        finally:
            daemon.stop()
        return run

    def _execute(self, command: list[str], python: Path, log: Path, conf: dict[str, str]) -> bool:
        log.parent.mkdir(parents=True, exist_ok=True)
        with log.open("ab") as output:
            try:
                done = subprocess.run(
                    command,
                    stdin=subprocess.DEVNULL,
                    stdout=output,
                    stderr=subprocess.STDOUT,
                    env={**_environment(python, self.path), SPARK_CONF_ENV: json.dumps(conf)},
                    cwd=self.base,
                    timeout=WORKLOAD_TIMEOUT,
                    check=False,
                )
            except subprocess.TimeoutExpired:
                output.write(f"\n{command[3:5]} did not finish within {WORKLOAD_TIMEOUT:.0f} s\n".encode())
                return False
        return done.returncode == 0

    def _chroot(self) -> str:
        chroot = f"/compat-{uuid.uuid4().hex}"
        admin = new_test_client(self.zookeeper.connect_string)
        admin.start(timeout=15)
        try:
            admin.ensure_path(chroot)
        finally:
            admin.stop()
            admin.close()
        return f"{self.zookeeper.connect_string}{chroot}"

    def _observe(self, run: ReleaseRun, daemon: LocalDaemon) -> None:
        """What the listener's daemon followed and registered, once it has settled."""
        newest = {name: job["committed"][-1] for name, job in run.jobs.items() if job["committed"]}
        deadline = time.monotonic() + PUSH_SETTLE_SECONDS
        with daemon.client() as client:
            while True:
                run.followed = {j.job: j.latest_epoch for j in client.jobs()}
                if (
                    all(run.followed.get(job, -1) >= e for job, e in newest.items())
                    or time.monotonic() > deadline
                ):
                    break
                time.sleep(0.1)
        zookeeper = new_test_client(run.zookeeper)
        zookeeper.start(timeout=15)
        try:
            layout = Layout()
            for job in run.followed:
                names = (
                    zookeeper.get_children(layout.epochs(job)) if zookeeper.exists(layout.epochs(job)) else []
                )
                run.registered[job] = sorted(e for e in map(parse_epoch_name, names) if e is not None)
        finally:
            zookeeper.stop()
            zookeeper.close()

    def _collect_oracle(self, run: ReleaseRun) -> None:
        """Every store's dump, by the release's own reader where it could read it, else
        by the pin's (:data:`READER_OF_LAST_RESORT`)."""
        own: dict[str, Any] = run.result.get("oracle", {})
        fallback: dict[str, Any] = {}
        if not run.release.features.state_reader or any(unread(own.get(job)) for job in run.jobs):
            pin = READER_OF_LAST_RESORT.pyspark
            self.say(f"{run.release}: reading what its own reader could not with pyspark {pin}")
            fallback = {
                name: dump_job(self.spark, job) for name, job in run.jobs.items() if unread(own.get(name))
            }
        for job in run.jobs:
            mine, theirs = own.get(job, {}), fallback.get(job, {})
            own_stores = {(s["operator_id"], s["store"]): s for s in mine.get("stores", [])}
            last_resort = {(s["operator_id"], s["store"]): s for s in theirs.get("stores", [])}
            if not own_stores and not last_resort:
                errors = [mine.get("error", "no reader"), theirs.get("error", "not read")]
                run.unreadable[job] = " | ".join(errors)
            for key in sorted({*own_stores, *last_resort}):
                chosen, reader = own_stores.get(key), str(run.result["pyspark"])
                own_error = mine.get("error", "no reader") if chosen is None else chosen.get("error")
                if chosen is None or "error" in chosen:
                    chosen, reader = last_resort.get(key), READER_OF_LAST_RESORT.pyspark
                if chosen is None or "error" in chosen:
                    errors = [own_error, chosen.get("error") if chosen else None]
                    run.unreadable[f"{job} {key[0]}/{key[1]}"] = " | ".join(e for e in errors if e)
                    continue
                epochs = {int(e): rows for e, rows in chosen["epochs"].items()}
                run.stores.append(StoreDump(job, key[0], key[1], chosen["kind"], epochs, reader, own_error))
