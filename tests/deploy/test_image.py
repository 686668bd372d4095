"""The Dockerfile offline: hadolint passes with no rule ignored; the user is numeric and owns the
data directory; only the daemon's extras are installed, every dependency pinned by
deploy/constraints.txt, and the pins agree with what the distributions' pyproject.toml files ask for."""

from __future__ import annotations

import re
import subprocess

from tests import distributions, pins
from tests.deploy.manifests import DOCKERFILE, ROOT, image, tool

CONSTRAINTS = ROOT / "deploy" / "constraints.txt"


def test_hadolint_passes_with_no_rule_ignored() -> None:
    done = subprocess.run(
        [tool("hadolint"), "--no-color", "--failure-threshold", "info", str(DOCKERFILE)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert (done.returncode, done.stdout, done.stderr) == (0, "", "")
    assert "hadolint ignore" not in DOCKERFILE.read_text()


def test_a_numeric_user_owns_the_data_directory_before_it_is_a_volume() -> None:
    built = image()
    user, _, group = built.user.partition(":")
    assert user.isdigit() and int(user) > 0 and group.isdigit()
    text = DOCKERFILE.read_text()
    final = text[text.rindex("\nFROM ") :]
    data_dir = built.env["EPOCHSTATE_DATA_DIR"]
    volume = final.index(f"VOLUME {data_dir}")
    assert final.index(f"mkdir -p {data_dir}") < volume
    assert final.index(f'chown "${{UID}}:${{UID}}" {data_dir}') < volume
    assert re.search(rf"ARG UID={user}\n", final)
    assert final.index("USER ") < final.index("ENTRYPOINT")
    assert built.entrypoint == ["epochstate", "daemon"]
    # docker and compose health checks ask the daemon through its socket in the data directory.
    assert built.healthcheck == ["epochstate", "health", "--target", f"unix://{data_dir}/epochstate.sock"]
    assert "STOPSIGNAL SIGTERM" in final


def _extras_script() -> str:
    found = re.search(r'^EXTRAS = "([a-z0-9,]+)"$', (ROOT / ".ci" / "constraints.py").read_text(), re.M)
    assert found
    return found.group(1)


def test_only_the_daemon_and_filesystem_extras_are_installed_with_the_constraints() -> None:
    extras = _extras_script()
    assert extras == "daemon,s3,gcs,azure,hdfs"
    text = DOCKERFILE.read_text()
    assert text.count(f"'.[{extras}]'") == 1 and text.count(f"'epochstate[{extras}]'") == 1
    assert text.count("--constraint") == 2
    assert "[spark" not in text and "[dev" not in text


def test_the_image_builds_the_distributions_the_daemon_needs() -> None:
    found = re.search(
        r'^IMAGE_DISTRIBUTIONS = "([a-z_ ]+)"$', (ROOT / ".ci" / "constraints.py").read_text(), re.M
    )
    assert found
    folders = found.group(1).split()
    text = DOCKERFILE.read_text()
    assert folders == re.findall(r"^COPY (\S+) \./", text, re.M)[-len(folders) :]
    assert " ".join(f"./{f}" for f in folders) + " '.[" in text
    # Exactly the distributions the extras reach: the daemon's side and the base install.
    built = {d.name for d in distributions.members() if d.folder.name in folders}
    reached = set(_image().ours) - {"epochstate"}
    assert built == reached
    assert not reached & {"epochstate-spark", "epochstate-devtools"}


def _image() -> distributions.Closure:
    """What ``epochstate[EXTRAS]`` comes to, through this repository's distributions."""
    return distributions.closure([f"epochstate[{_extras_script()}]"])


def test_every_requirement_is_pinned_to_a_version_it_allows() -> None:
    pins.assert_each_pinned(_image().third_party, pins.read(CONSTRAINTS), "deploy/constraints.txt")


def test_the_pins_are_closed_under_their_own_requirements() -> None:
    """Each pinned distribution installed here at its pinned version: what it requires (on the
    image's platform) is pinned too, at a version it allows (make constraints writes both)."""
    pinned = pins.read(CONSTRAINTS)
    assert pins.assert_closed(pinned) >= len(pinned) // 2  # most pins are what the dev environment runs
