"""One virtualenv per Spark release, kept outside the clone so that runs on the same
machine reuse it.

``$EPOCHSTATE_COMPAT_HOME`` (default ``~/.cache/epochstate/compat``) holds
``pyspark-<version>/``, made when missing: that pyspark, and what the workload
and the Spark side of epochstate need (taken from ``pyproject.toml``: the client's
dependencies, the ``zookeeper`` extra, the ``spark`` extra but pyspark, and for
releases with Python data sources pandas and pyarrow). epochstate itself is not
installed there: the workload runs with this clone's distributions' src folders on
its path, so the venv never holds stale code.

Creation holds a file lock (``pyspark-<version>.lock``), so two test processes
racing for the same venv make it once; a venv is complete only once its stamp
(``.epochstate-compat.json``) names the same requirements, else it is made again.
Progress (pip's lines) goes to a callback, since a cold venv downloads 300-450 MB.
A test session makes the missing venvs in a background thread from its start
(``warm_up``, progress in ``pyspark-<version>.log``), while its other tests run;
a test that needs one still being made waits, printing the log's last line.

Run ``python -m tests.compat.venvs`` to make every release's venv ahead of a run
(``make test`` runs it in the background while the static checks run).
"""

from __future__ import annotations

import atexit
import fcntl
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path

from tests.compat.releases import RELEASES, SparkRelease
from tests.distributions import root, third_party

HOME_VARIABLE = "EPOCHSTATE_COMPAT_HOME"
STAMP = ".epochstate-compat.json"
# The Spark side's requirements that are the release's own choice, not ours.
RELEASE_SPECIFIC = ("pyspark", "pandas", "pyarrow")
PIP_TIMEOUT = 1800.0
WAIT_NOTE_SECONDS = 15.0
# pip's priority: a nice-10 group weighs about a tenth of a nice-0 one.
BACKGROUND_NICE = 10

Say = Callable[[str], None]


class VenvUnavailable(RuntimeError):
    """A release's virtualenv could not be made; the message says what to do."""


def compat_home() -> Path:
    """Where the releases' virtualenvs live."""
    configured = os.environ.get(HOME_VARIABLE)
    return Path(configured) if configured else Path.home() / ".cache" / "epochstate" / "compat"


def _name(requirement: str) -> str:
    for separator in "<>=!~;[ ":
        requirement = requirement.split(separator, 1)[0]
    return requirement.strip().lower()


def requirements(release: SparkRelease) -> list[str]:
    """What ``release``'s venv installs: the third-party requirements of the Spark side
    (``epochstate-spark`` and the distributions it builds on, read from this clone), the
    release's own pyspark, and pandas and pyarrow where the release has a pandas API."""
    wanted = [r for r in third_party(["epochstate-spark"]) if _name(r) not in RELEASE_SPECIFIC]
    if release.pandas:
        wanted += [r for r in root().extras["spark"] if _name(r) in ("pandas", "pyarrow")]
    return [f"pyspark=={release.pyspark}", *wanted]


@dataclass(frozen=True)
class ReleaseVenv:
    """A release's complete virtualenv."""

    release: SparkRelease
    path: Path

    @property
    def python(self) -> Path:
        return self.path / "bin" / "python"


def venv_path(release: SparkRelease, home: Path | None = None) -> Path:
    return (home or compat_home()) / f"pyspark-{release.pyspark}"


@contextmanager
def _locked(lock_path: Path, say: Say, progress: Path | None = None) -> Iterator[None]:
    """Hold ``lock_path``; while another holder makes the venv, say so now and then,
    with the last line of its ``progress`` log when there is one."""
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    with lock_path.open("a") as lock:
        said_at = -WAIT_NOTE_SECONDS
        while True:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() - said_at >= WAIT_NOTE_SECONDS:
                    said_at = time.monotonic()
                    making = lock_path.with_suffix("")
                    say(f"waiting for another process to finish {making}{_last_line(progress)}")
                time.sleep(0.5)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _last_line(log: Path | None) -> str:
    try:
        lines = log.read_text(errors="replace").splitlines() if log else []
    except OSError:
        return ""
    return f" (its log {log}: {lines[-1].strip()})" if lines else ""


def _stamp(release: SparkRelease) -> dict[str, object]:
    return {
        "pyspark": release.pyspark,
        "requirements": requirements(release),
        "python": ".".join(map(str, sys.version_info[:2])),
    }


def _complete(path: Path, release: SparkRelease) -> bool:
    try:
        found = json.loads((path / STAMP).read_text())
    except (OSError, ValueError):
        return False
    return bool(found == _stamp(release) and (path / "bin" / "python").exists())


_running: set[subprocess.Popen[str]] = set()  # pip processes, stopped if the tests exit first


def _run(command: list[str], say: Say, prefix: str) -> tuple[int, list[str]]:
    """Run ``command``, passing each output line to ``say``; its exit code and last lines."""
    process = subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        text=True,
        start_new_session=True,  # a group of its own, its children (venv's ensurepip) stopped with it
    )
    _yield_cpu(process.pid)
    _running.add(process)
    try:
        assert process.stdout is not None
        tail: list[str] = []
        for line in process.stdout:
            line = line.rstrip()
            if line:
                say(f"{prefix}{line}")
                tail = [*tail[-19:], line]
        return process.wait(timeout=PIP_TIMEOUT), tail
    except BaseException:  # SystemExit from SIGTERM included: pip must not outlive its maker
        _kill(process)
        raise
    finally:
        _running.discard(process)


@atexit.register
def _stop_running() -> None:
    for process in list(_running):
        _kill(process)


def _yield_cpu(pid: int) -> None:
    """Lower the priority of ``pid`` (a session leader) and of what it starts, so that a
    venv made ahead of need takes the CPU the tests leave idle rather than half of it.

    Where the kernel groups each session for scheduling (autogroup), a process's own nice
    counts only within its session: the session's nice is what weighs against the tests.
    """
    with suppress(OSError):
        os.setpriority(os.PRIO_PROCESS, pid, BACKGROUND_NICE)
    with suppress(OSError):
        Path(f"/proc/{pid}/autogroup").write_text(str(BACKGROUND_NICE))


def _kill(process: subprocess.Popen[str]) -> None:
    with suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)


def ensure_venv(release: SparkRelease, say: Say = print, home: Path | None = None) -> ReleaseVenv:
    """``release``'s virtualenv, made first if missing or incomplete.

    Raises:
        VenvUnavailable: venv or pip failed (no network and nothing cached, say);
            the message holds pip's last lines.
    """
    path = venv_path(release, home)
    with _locked(path.with_name(path.name + ".lock"), say, log_path(release, home)):
        if _complete(path, release):
            return ReleaseVenv(release, path)
        started = time.monotonic()
        say(f"{release}: making {path} (pyspark {release.pyspark}: 300-450 MB if not in the pip cache)")
        shutil.rmtree(path, ignore_errors=True)
        prefix = f"{release}: "
        code, tail = _run([sys.executable, "-m", "venv", str(path)], say, prefix)
        if code == 0:
            # --no-compile: byte-compiling every module of pyspark, pandas and pyarrow is half
            # of pip's CPU here, paid while the session's other tests run; a module is compiled
            # when the workload first imports it instead.
            pip = [
                str(path / "bin" / "python"),
                "-m",
                "pip",
                "install",
                "--disable-pip-version-check",
                "--no-compile",
            ]
            code, tail = _run([*pip, "--progress-bar", "off", *requirements(release)], say, prefix)
        if code != 0:
            shutil.rmtree(path, ignore_errors=True)
            raise VenvUnavailable(
                f"could not make the virtualenv of {release} at {path} (exit {code}); it needs "
                f"PyPI (or a pip cache holding pyspark {release.pyspark}). Last output:\n" + "\n".join(tail)
            )
        (path / STAMP).write_text(json.dumps(_stamp(release), indent=1) + "\n")
        say(f"{release}: ready in {time.monotonic() - started:.0f} s")
        return ReleaseVenv(release, path)


def log_path(release: SparkRelease, home: Path | None = None) -> Path:
    """Where :func:`warm_up` writes the progress of making ``release``'s venv."""
    path = venv_path(release, home)
    return path.with_name(f"{path.name}.log")


def warm_up(releases: Iterable[SparkRelease], home: Path | None = None) -> threading.Thread:
    """Make the missing venvs of ``releases`` in a background thread, each one's progress
    in its :func:`log_path`, so that a test session's other tests hide the download.

    A venv it cannot make is left to the test that needs it, which tries again and
    fails with pip's words; one still being made makes that test wait, naming the log.
    """
    wanted = list(releases)

    def make() -> None:
        for release in wanted:
            log = log_path(release, home)
            log.parent.mkdir(parents=True, exist_ok=True)
            with log.open("a") as output, suppress(VenvUnavailable):
                ensure_venv(release, lambda line: print(line, file=output, flush=True), home)

    thread = threading.Thread(target=make, name="compat-venvs", daemon=True)
    thread.start()
    return thread


def main() -> int:
    """Make every release's venv (``python -m tests.compat.venvs``), printing progress.

    Stopped by SIGTERM (``make test`` stops it when a static check fails), it stops its
    pip too; the venv it was making has no stamp, so it is made again when next wanted."""
    signal.signal(signal.SIGTERM, lambda number, _frame: sys.exit(128 + number))
    for release in RELEASES:
        if not release.pinned:
            print(ensure_venv(release, say=lambda line: print(line, flush=True)).path, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
