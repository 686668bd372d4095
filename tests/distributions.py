"""The repository's distributions, read from their ``pyproject.toml`` files.

The repository is a monorepo: each top-level folder with a ``pyproject.toml`` is one
distribution (``core/`` is ``epochstate-core``), a src layout whose package lives in
the shared namespace (``core/src/epochstate/core/``); the root's ``pyproject.toml``
is the ``epochstate`` distribution, which holds no code and gathers the others.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import tomllib

ROOT = Path(__file__).resolve().parent.parent
_NAME = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)(?:\[([^\]]*)\])?")


@dataclass(frozen=True)
class Distribution:
    """One distribution of the repository: its folder and what it requires."""

    name: str
    folder: Path
    version: str
    dependencies: tuple[str, ...]
    extras: dict[str, tuple[str, ...]]

    @property
    def src(self) -> Path:
        """The folder that holds its part of the ``epochstate`` namespace."""
        return self.folder / "src"


def requirement_name(requirement: str) -> tuple[str, tuple[str, ...]]:
    """The distribution a requirement names, normalised, and the extras it asks for."""
    match = _NAME.match(requirement)
    assert match, requirement
    extras = tuple(e.strip() for e in (match.group(2) or "").split(",") if e.strip())
    return re.sub(r"[-_.]+", "-", match.group(1)).lower(), extras


def _read(folder: Path) -> Distribution:
    project = tomllib.loads((folder / "pyproject.toml").read_text())["project"]
    return Distribution(
        name=project["name"],
        folder=folder,
        version=project["version"],
        dependencies=tuple(project.get("dependencies", ())),
        extras={k: tuple(v) for k, v in project.get("optional-dependencies", {}).items()},
    )


@cache
def root() -> Distribution:
    """The ``epochstate`` distribution of the repository's root."""
    return _read(ROOT)


@cache
def members() -> tuple[Distribution, ...]:
    """Every distribution with code: the top-level folders with a ``pyproject.toml``."""
    return tuple(_read(p.parent) for p in sorted(ROOT.glob("*/pyproject.toml")))


def by_name() -> dict[str, Distribution]:
    return {d.name: d for d in (root(), *members())}


@dataclass(frozen=True)
class Closure:
    """What some requirements come to: the repository's distributions they reach, and the
    third-party requirements of all of them, in a stable order and without repeats."""

    ours: tuple[str, ...]
    third_party: tuple[str, ...]


def closure(requirements: Iterable[str]) -> Closure:
    """Follow every ``epochstate*`` requirement (with the extras it names) through this
    repository's distributions."""
    known = by_name()
    ours: list[str] = []
    found: list[str] = []
    seen: set[tuple[str, tuple[str, ...]]] = set()

    def visit(requirement: str) -> None:
        name, extras = requirement_name(requirement)
        if name not in known:
            if requirement not in found:
                found.append(requirement)
            return
        if (name, extras) in seen:
            return
        seen.add((name, extras))
        if name not in ours:
            ours.append(name)
        distribution = known[name]
        for nested in distribution.dependencies:
            visit(nested)
        for extra in extras:
            for nested in distribution.extras[extra]:
                visit(nested)

    for requirement in requirements:
        visit(requirement)
    return Closure(tuple(ours), tuple(found))


def third_party(requirements: Iterable[str]) -> list[str]:
    """The third-party requirements ``requirements`` come to (:func:`closure`)."""
    return list(closure(requirements).third_party)
