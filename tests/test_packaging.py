"""The distributions as a user installs them: src layouts in one namespace, the wheels, the base
install (client and CLI), a client-only install."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from epochstate.core.version import VERSION
from tests.distributions import ROOT, members, requirement_name, root

# What the base install must not pull in: the daemon's and the Spark side's libraries.
DAEMON_SIDE = ("kazoo", "rocksdict", "prometheus_client", "pyspark", "pydantic_settings", "lz4", "xxhash")


def test_every_distribution_is_a_src_layout_in_the_shared_namespace() -> None:
    for member in members():
        namespace = member.src / "epochstate"
        assert not (namespace / "__init__.py").exists(), f"{member.name}: epochstate is a namespace"
        packages = [p for p in namespace.iterdir() if p.is_dir() and p.name != "__pycache__"]
        assert len(packages) == 1, f"{member.name}: one package each, not {packages}"
        assert (packages[0] / "__init__.py").exists(), member.name
        assert (packages[0] / "py.typed").exists(), f"{member.name}: its types are part of it"
    assert not (ROOT / "epochstate").exists(), "nothing at the root shadows the namespace"


def test_the_distributions_share_one_version_and_pin_each_other_to_it() -> None:
    for distribution in (root(), *members()):
        assert distribution.version == VERSION, distribution.name
        everything = [*distribution.dependencies, *(r for v in distribution.extras.values() for r in v)]
        for requirement in everything:
            name = requirement_name(requirement)[0]
            if name.startswith("epochstate-"):  # the root's own extras refer to it by name
                assert requirement.endswith(f"=={VERSION}"), (distribution.name, requirement)


def test_no_symlinks_are_tracked() -> None:
    staged = subprocess.run(
        ["git", "ls-files", "-s"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.splitlines()
    links = [line.split("\t", 1)[1] for line in staged if line.startswith("120000")]
    assert links == []


@pytest.fixture(scope="module")
def wheels(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder with the wheel of every distribution of the repository."""
    out = tmp_path_factory.mktemp("wheels")
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
            *(str(d.folder) for d in (root(), *members())),
        ],
        check=True,
        env={**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1"},
    )
    return out


def test_each_wheel_holds_its_package_in_the_namespace(wheels: Path) -> None:
    for member in members():
        (built,) = wheels.glob(f"{member.name.replace('-', '_')}-{VERSION}-*.whl")
        names = set(zipfile.ZipFile(built).namelist())
        (package,) = {n.split("/")[1] for n in names if n.startswith("epochstate/")}
        assert f"epochstate/{package}/__init__.py" in names
        assert f"epochstate/{package}/py.typed" in names
        # The namespace stays open: no wheel owns epochstate/__init__.py.
        assert "epochstate/__init__.py" not in names
        # Nothing outside the namespace: no generic top-level module such as `daemon` or `client`.
        top_level = {n.split("/", 1)[0] for n in names if ".dist-info/" not in n}
        assert top_level == {"epochstate"}, member.name
    proto = set(zipfile.ZipFile(next(wheels.glob("epochstate_proto-*.whl"))).namelist())
    assert {"epochstate/v1/epochstate_pb2.pyi", "epochstate/v1/epochstate.proto"} <= proto
    gathering = set(zipfile.ZipFile(next(wheels.glob(f"epochstate-{VERSION}-*.whl"))).namelist())
    assert all(".dist-info/" in n for n in gathering), "the root distribution holds no code"


def _venv(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """A fresh venv without pip of its own: :func:`_install` runs this pip into it,
    which spares the venv's ensurepip (seconds per venv)."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    env = {**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    env.pop("PYTHONPATH", None)
    return venv / ("Scripts" if os.name == "nt" else "bin"), env


def _install(python: Path, wheels: Path, distribution: str, env: dict[str, str]) -> None:
    """Install ``distribution`` from ``wheels`` (and its dependencies) into ``python``'s venv;
    modules are byte-compiled when first imported, not at install."""
    pip = [sys.executable, "-m", "pip", "--python", str(python), "install", "--quiet", "--no-compile"]
    subprocess.run([*pip, "--find-links", str(wheels), distribution], check=True, env=env)


def test_base_install_gives_the_client_and_the_cli_only(wheels: Path, tmp_path: Path) -> None:
    bin_dir, env = _venv(tmp_path)
    python = bin_dir / "python"
    _install(python, wheels, "epochstate", env)

    probe = (
        "import importlib.util, epochstate.client, epochstate.core.errors\n"
        "from epochstate.client import EpochStateClient\n"
        f"missing = [m for m in {DAEMON_SIDE!r} if importlib.util.find_spec(m) is None]\n"
        "print(','.join(missing))\n"
    )
    # From the repository's root too: no folder there shadows the installed namespace.
    for where in (tmp_path, ROOT):
        result = subprocess.run(
            [str(python), "-c", probe], capture_output=True, text=True, env=env, cwd=where, check=True
        )
        assert result.stdout.strip().split(",") == list(DAEMON_SIDE), where

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


def test_the_client_alone_installs_without_the_cli(wheels: Path, tmp_path: Path) -> None:
    bin_dir, env = _venv(tmp_path)
    python = bin_dir / "python"
    _install(python, wheels, "epochstate-client", env)
    probe = (
        "import importlib.util as u\n"
        "from epochstate.client import EpochStateClient\n"
        "print(u.find_spec('typer') is None, u.find_spec('epochstate.cli') is None)\n"
    )
    result = subprocess.run([str(python), "-c", probe], capture_output=True, text=True, env=env, check=True)
    assert result.stdout.split() == ["True", "True"], result.stdout
