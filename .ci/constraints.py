"""Print pinned dependencies (``make constraints`` writes both files):

* ``python .ci/constraints.py``: ``deploy/constraints.txt``, the image's;
* ``python .ci/constraints.py --dev``: ``.ci/constraints-dev.txt``, the development
  environment's (what ``make`` installs in ``.venv``: every distribution and ``.[dev]``).
  With it pip resolves that environment without backtracking through the releases of
  loosely bounded dependencies (a minute or more on a 2-core machine).

pip resolves what ``pip install ./proto ./core ... '.[EXTRAS]'`` (the distributions of
this repository and the root's extras) would install into an empty environment
(``--dry-run --ignore-installed --report``, nothing is installed) and this prints
each distribution of that resolution as ``name==version``, the project's own
(``epochstate``, ``epochstate-*``) left out. Run it with Python 3.11 on Linux, the
image's: markers in the dependencies are evaluated for the interpreter that resolves.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# The extras the image installs (the Dockerfile names the same; tests/deploy checks it).
EXTRAS = "daemon,s3,gcs,azure,hdfs"
# The repository's distributions the image installs: the daemon and what it builds on, and
# the client and CLI of the base install (its health check runs `epochstate health`).
IMAGE_DISTRIBUTIONS = "proto core client cli daemon"
IMAGE_PYTHON = (3, 11)
# What the development environment installs (the Makefile's DISTRIBUTIONS and '.[dev]').
DEV_DISTRIBUTIONS = "proto core client cli daemon spark_plugin devtools"
DEV_EXTRAS = "dev"


def resolve(distributions: str = IMAGE_DISTRIBUTIONS, extras: str = EXTRAS) -> dict[str, str]:
    """Distribution name (normalized) -> version, as pip resolves ``distributions``
    (folders) and ``.[extras]``."""
    report = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--quiet",
            "--dry-run",
            "--ignore-installed",
            "--report",
            "-",
            *(f"./{folder}" for folder in distributions.split()),
            f".[{extras}]",
        ],
        cwd=ROOT,
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    pinned: dict[str, str] = {}
    for item in json.loads(report)["install"]:
        metadata = item["metadata"]
        name = metadata["name"].lower().replace("_", "-").replace(".", "-")
        if name != "epochstate" and not name.startswith("epochstate-"):
            pinned[name] = metadata["version"]
    return pinned


def main() -> int:
    if sys.version_info[:2] != IMAGE_PYTHON:
        print(f"run this with Python {'.'.join(map(str, IMAGE_PYTHON))}, the image's", file=sys.stderr)
        return 2
    dev = sys.argv[1:] == ["--dev"]
    if sys.argv[1:] and not dev:
        print("usage: constraints.py [--dev]", file=sys.stderr)
        return 2
    pinned = resolve(DEV_DISTRIBUTIONS, DEV_EXTRAS) if dev else resolve()
    whose = "The development environment's" if dev else "The image's"
    sys.stdout.write(
        f"# {whose} dependencies, pinned: what pip resolves for\n"
        f"#   pip install '.[{DEV_EXTRAS if dev else EXTRAS}]'\n"
        f"# on CPython {IMAGE_PYTHON[0]}.{IMAGE_PYTHON[1]}, Linux. Written by `make constraints`"
        " (.ci/constraints.py); do not edit.\n"
    )
    for name in sorted(pinned):
        sys.stdout.write(f"{name}=={pinned[name]}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
