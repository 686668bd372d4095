"""Write ``deploy/constraints.txt``: the image's dependencies, every one pinned (``make constraints``).

pip resolves what ``pip install ./proto ./core ... '.[EXTRAS]'`` (the image's
distributions of this repository and the root's extras) would install into an empty
environment (``--dry-run --ignore-installed --report``, nothing is installed) and
this prints each distribution of that resolution as ``name==version``, the
project's own (``epochstate``, ``epochstate-*``) left out. Run it with the image's
Python (3.11, Linux): markers in the dependencies are evaluated for the interpreter
that resolves.
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


def resolve() -> dict[str, str]:
    """Distribution name (normalized) -> version, as pip resolves ``.[EXTRAS]``."""
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
            *(f"./{folder}" for folder in IMAGE_DISTRIBUTIONS.split()),
            f".[{EXTRAS}]",
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
    pinned = resolve()
    sys.stdout.write(
        "# The image's dependencies, pinned: what pip resolves for\n"
        f"#   pip install '.[{EXTRAS}]'\n"
        f"# on CPython {IMAGE_PYTHON[0]}.{IMAGE_PYTHON[1]}, Linux. Written by `make constraints`"
        " (.ci/constraints.py); do not edit.\n"
    )
    for name in sorted(pinned):
        sys.stdout.write(f"{name}=={pinned[name]}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
