"""The releases' virtualenvs: made once under a lock, remade when the requirements
change, and a failure to make one fails with pip's words (never a skip)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tests.compat import venvs
from tests.compat.releases import READER_OF_LAST_RESORT, UNDER_TEST, Features, SparkRelease
from tests.compat.venvs import STAMP, VenvUnavailable, ensure_venv, requirements, warm_up
from tests.distributions import ROOT, root

pytestmark = pytest.mark.compat


def test_the_pin_is_the_projects() -> None:
    spark_extra = root().extras["spark"]
    pin = next(r for r in spark_extra if r.startswith("pyspark"))
    # With its Spark Connect client: the extra is what a Connect application installs too.
    assert pin == f"pyspark[connect]=={READER_OF_LAST_RESORT.pyspark}"
    assert READER_OF_LAST_RESORT.pinned and all(not r.pinned for r in UNDER_TEST)


def test_requirements_come_from_pyproject_without_the_daemon() -> None:
    old, new = UNDER_TEST[0], UNDER_TEST[-1]
    assert requirements(old)[0] == f"pyspark=={old.pyspark}"
    names = {venvs._name(r) for r in requirements(new)}
    assert {"grpcio", "protobuf", "kazoo", "confluent-kafka", "pandas", "pyarrow"} <= names
    assert not {n for n in names if n.startswith("epochstate")}, (
        "the clone's code is on the path, not installed"
    )
    assert not names & {"rocksdict", "pydantic-settings", "typer"}, "no daemon, no CLI"
    assert "pandas" not in {venvs._name(r) for r in requirements(old)}, "3.5 needs no pandas"


def test_a_venv_that_cannot_be_made_fails_with_pips_words(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # No index and nothing to find: what a machine without network and cache sees.
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(tmp_path / "nothing"))
    monkeypatch.setenv("PIP_NO_CACHE_DIR", "1")
    release = SparkRelease("0.0", "0.0.1", Features(False, False, False, False), pandas=False)
    said: list[str] = []
    expected = r"could not make the virtualenv of spark-0\.0 .* pyspark 0\.0\.1"
    with pytest.raises(VenvUnavailable, match=expected):
        ensure_venv(release, say=said.append, home=tmp_path)
    assert any("making" in line for line in said), "progress was printed"
    assert not (tmp_path / "pyspark-0.0.1").exists(), "a half-made venv is removed"


def test_the_background_warm_up_leaves_a_failure_to_the_test(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(tmp_path / "nothing"))
    monkeypatch.setenv("PIP_NO_CACHE_DIR", "1")
    release = SparkRelease("0.0", "0.0.1", Features(False, False, False, False), pandas=False)
    warm_up([release], home=tmp_path).join(120)
    log = venvs.log_path(release, tmp_path).read_text()
    assert "making" in log and "No matching distribution found for pyspark==0.0.1" in log
    with pytest.raises(VenvUnavailable):
        ensure_venv(release, say=lambda line: None, home=tmp_path)


def test_a_venv_is_complete_only_with_its_requirements_stamped(tmp_path: Path) -> None:
    release = UNDER_TEST[0]
    path = tmp_path / f"pyspark-{release.pyspark}"
    (path / "bin").mkdir(parents=True)
    (path / "bin" / "python").symlink_to(sys.executable)
    assert not venvs._complete(path, release)
    (path / STAMP).write_text(json.dumps({"pyspark": release.pyspark, "requirements": []}))
    assert not venvs._complete(path, release), "other requirements: made again"
    (path / STAMP).write_text(json.dumps(venvs._stamp(release)))
    assert venvs._complete(path, release)
    assert ensure_venv(release, say=pytest.fail, home=tmp_path).python == path / "bin" / "python"


HOLDER = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from tests.compat.venvs import _locked

    with _locked(Path(sys.argv[1]), print):
        print("holding", flush=True)
        time.sleep(2)
    """
)


def test_a_second_process_waits_for_the_one_making_the_venv(tmp_path: Path) -> None:
    lock = tmp_path / "pyspark-9.9.9.lock"
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(lock)], cwd=ROOT, stdout=subprocess.PIPE, text=True
    )
    assert holder.stdout is not None
    assert holder.stdout.readline().strip() == "holding"
    said: list[str] = []
    started = time.monotonic()
    with venvs._locked(lock, said.append):
        waited = time.monotonic() - started
    assert holder.wait(10) == 0
    assert waited > 1.0, "the lock is ours only once the holder let go of it"
    assert said and "waiting for another process" in said[0]


def test_pip_yields_the_cpu_to_the_tests() -> None:
    # The child reports once its priority was lowered (at once, after it started): its
    # own nice, and its session's, which is what weighs against the tests under autogroup.
    probe = textwrap.dedent(
        """
        import os, time
        deadline = time.monotonic() + 30
        while os.getpriority(os.PRIO_PROCESS, 0) == 0 and time.monotonic() < deadline:
            time.sleep(0.01)
        print(os.getpriority(os.PRIO_PROCESS, 0), os.getsid(0) == os.getpid())
        print(open("/proc/self/autogroup").read().split()[-1])
        """
    )
    said: list[str] = []
    code, _ = venvs._run([sys.executable, "-c", probe], said.append, "")
    assert code == 0
    assert said == [f"{venvs.BACKGROUND_NICE} True", str(venvs.BACKGROUND_NICE)]
