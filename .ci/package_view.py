"""Lay out the installed package's tree under ``build/view/`` for static tools.

The distribution maps top-level folders into one namespace
(``[tool.setuptools.package-dir]`` in pyproject.toml); at run time an editable
install resolves that mapping with an import hook, which mypy and import-linter
cannot follow. They read ``build/view/epochstate/``, a tree of links to the real
folders, made afresh by this script. Nothing in it is committed.

``package_view.py``              make the view, print its path
``package_view.py --into DIR``   make the view in ``DIR`` instead (the compatibility
                                 suite puts one on other Spark releases' path)
``package_view.py --paths``      copy stdin to stdout with view paths turned back
                                 into repository paths (for mypy's messages)
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - the dev extra installs tomli there
    import tomli as tomllib

ROOT = Path(__file__).resolve().parent.parent
VIEW = ROOT / "build" / "view"


def package_dirs() -> dict[str, str]:
    """The package-dir mapping of pyproject.toml: package name -> folder."""
    table = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]
    return dict(table)


def repository_paths() -> int:
    """Rewrite ``build/view/epochstate/<package>/`` to the package's folder on stdin."""
    prefixes = sorted(
        ((f"build/view/{name.replace('.', '/')}/", f"{folder}/") for name, folder in package_dirs().items()),
        key=lambda pair: len(pair[0]),
        reverse=True,
    )
    for line in sys.stdin:
        for view, folder in prefixes:
            if view in line:
                line = line.replace(view, folder)
                break
        sys.stdout.write(line)
    return 0


def main() -> int:
    if sys.argv[1:] == ["--paths"]:
        return repository_paths()
    view = Path(sys.argv[2]).resolve() if sys.argv[1:2] == ["--into"] and len(sys.argv) == 3 else VIEW
    mapping = package_dirs()
    shutil.rmtree(view, ignore_errors=True)
    for package, folder in sorted(mapping.items()):
        target = view.joinpath(*package.split("."))
        source = ROOT / folder
        if package == "epochstate":
            target.mkdir(parents=True)
            for file in source.iterdir():
                if file.is_file():
                    (target / file.name).symlink_to(file)
            continue
        target.symlink_to(source, target_is_directory=True)
    print(view)
    return 0


if __name__ == "__main__":
    sys.exit(main())
