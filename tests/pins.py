"""Pin files (``name==version`` per line, ``#`` comments; ``make constraints`` writes them)
checked against the requirements they pin for."""

from __future__ import annotations

import importlib.metadata
from collections.abc import Iterable
from pathlib import Path

from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import NormalizedName, canonicalize_name
from packaging.version import Version

# The platform the pin files are resolved for (.ci/constraints.py refuses another Python).
PYTHON = "3.11"


def read(path: Path) -> dict[NormalizedName, Version]:
    """The pins of ``path``, by normalized distribution name."""
    found: dict[NormalizedName, Version] = {}
    for line in path.read_text().splitlines():
        if line and not line.startswith("#"):
            name, _, version = line.partition("==")
            found[canonicalize_name(name)] = Version(version)
    return found


def assert_each_pinned(
    requirements: Iterable[str], pinned: dict[NormalizedName, Version], where: str
) -> None:
    """Each requirement whose marker holds on the pins' platform is pinned, at a version it allows."""
    environment = _environment()
    wanted = [Requirement(r) for r in requirements]
    assert wanted
    for requirement in wanted:
        if requirement.marker is not None and not requirement.marker.evaluate(environment):
            continue
        name = canonicalize_name(requirement.name)
        assert name in pinned, f"{requirement} is not pinned in {where}"
        assert requirement.specifier.contains(pinned[name], prereleases=True), (requirement, pinned[name])


def assert_closed(pinned: dict[NormalizedName, Version]) -> int:
    """Each pinned distribution installed here at its pinned version: what it requires on the
    pins' platform is pinned too, at a version it allows. Returns how many were checked."""
    environment = _environment()
    checked = 0
    for name, version in pinned.items():
        try:
            distribution = importlib.metadata.distribution(name)
        except importlib.metadata.PackageNotFoundError:
            continue
        if Version(distribution.version) != version:
            continue
        checked += 1
        for text in distribution.requires or []:
            requirement = Requirement(text)
            if requirement.marker is not None and not requirement.marker.evaluate(environment):
                continue
            dependency = canonicalize_name(requirement.name)
            assert dependency in pinned, f"{name} needs {requirement}, which is not pinned"
            assert requirement.specifier.contains(pinned[dependency], prereleases=True), (name, requirement)
    return checked


def _environment() -> dict[str, str]:
    environment = {str(k): str(v) for k, v in default_environment().items()}
    environment.update(python_version=PYTHON, sys_platform="linux", extra="")
    return environment
