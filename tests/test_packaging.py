"""The distribution as a user installs it: the package list, the wheel, a client-only install."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import tomllib

ROOT = Path(__file__).resolve().parent.parent
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
SETUPTOOLS = PYPROJECT["tool"]["setuptools"]

# What the base install must not pull in: the daemon's and the Spark side's libraries.
DAEMON_SIDE = ("kazoo", "rocksdict", "prometheus_client", "pyspark", "pydantic_settings", "lz4", "xxhash")


def _packages_on_disk() -> set[str]:
    found: set[str] = set()
    for package, folder in SETUPTOOLS["package-dir"].items():
        base = ROOT / folder
        if package == "epochstate":
            found.add(package)
            continue
        for init in base.rglob("__init__.py"):
            relative = init.parent.relative_to(base)
            found.add(".".join((package, *relative.parts)))
    return found


def test_every_package_folder_is_listed_in_pyproject() -> None:
    assert set(SETUPTOOLS["packages"]) == _packages_on_disk()


def test_no_symlinks_are_tracked() -> None:
    staged = subprocess.run(
        ["git", "ls-files", "-s"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.splitlines()
    links = [line.split("\t", 1)[1] for line in staged if line.startswith("120000")]
    assert links == []


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--quiet",
            "--no-deps",
            "--no-build-isolation",
            "--wheel-dir",
            str(out),
            str(ROOT),
        ],
        check=True,
        env={**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1"},
    )
    (built,) = out.glob("epochstate-*.whl")
    return built


def test_wheel_holds_the_namespace_and_its_type_information(wheel: Path) -> None:
    names = set(zipfile.ZipFile(wheel).namelist())
    for package in SETUPTOOLS["packages"]:
        assert f"{package.replace('.', '/')}/__init__.py" in names, package
    assert "epochstate/py.typed" in names
    assert "epochstate/v1/epochstate_pb2.pyi" in names
    assert "epochstate/v1/epochstate.proto" in names or "epochstate/v1/epochstate_pb2.py" in names
    # Nothing outside the namespace: no generic top-level module such as `daemon` or `client`.
    top_level = {name.split("/", 1)[0] for name in names if not name.startswith("epochstate-")}
    assert top_level == {"epochstate"}


def test_base_install_gives_the_client_and_the_cli_only(wheel: Path, tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    bin_dir = venv / ("Scripts" if os.name == "nt" else "bin")
    python = bin_dir / "python"
    env = {**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    env.pop("PYTHONPATH", None)
    subprocess.run([str(python), "-m", "pip", "install", "--quiet", str(wheel)], check=True, env=env)

    probe = (
        "import importlib.util, epochstate.client, epochstate.core.errors\n"
        "from epochstate.client import EpochStateClient\n"
        f"missing = [m for m in {DAEMON_SIDE!r} if importlib.util.find_spec(m) is None]\n"
        "print(','.join(missing))\n"
    )
    result = subprocess.run(
        [str(python), "-c", probe], capture_output=True, text=True, env=env, cwd=tmp_path, check=True
    )
    assert result.stdout.strip().split(",") == list(DAEMON_SIDE)

    cli = subprocess.run(
        [str(bin_dir / "epochstate"), "--help"], capture_output=True, text=True, env=env, cwd=tmp_path
    )
    assert cli.returncode == 0, cli.stderr
    for command in ("get", "scan", "watch", "daemon", "align"):
        assert command in cli.stdout

    # The daemon is an extra: without it the command says so, on one line, and fails.
    daemon = subprocess.run(
        [str(bin_dir / "epochstate"), "daemon"], capture_output=True, text=True, env=env, cwd=tmp_path
    )
    assert daemon.returncode != 0
    assert "epochstate[daemon]" in daemon.stderr
    assert len(daemon.stderr.strip().splitlines()) == 1, daemon.stderr
