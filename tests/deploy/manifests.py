"""The manifests of ``deploy/`` as ``kubectl kustomize`` renders them, and the image's
Dockerfile as a kubelet would see it (entry point, environment, ports)."""

from __future__ import annotations

import functools
import json
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
DOCKERFILE = ROOT / "Dockerfile"

# Every folder of deploy/ with a kustomization: the bases, the layouts and any overlay.
KUSTOMIZATIONS = sorted(str(path.parent.relative_to(ROOT)) for path in DEPLOY.rglob("kustomization.yaml"))

Resource = dict[str, Any]


def tool(name: str) -> str:
    """A tool the dev extra installs into this environment (kubectl, hadolint), else on PATH."""
    beside = Path(sys.executable).parent / name
    if beside.exists():
        return str(beside)
    found = shutil.which(name)
    assert found, f"{name} is not installed: pip install -e '.[dev]'"
    return found


@functools.cache
def _rendered(kustomization: str) -> str:
    done = subprocess.run(
        [tool("kubectl"), "kustomize", str(ROOT / kustomization)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, f"kubectl kustomize {kustomization}: {done.stderr}"
    return done.stdout


def render(kustomization: str) -> list[Resource]:
    """The resources ``kubectl kustomize`` makes of ``kustomization`` (fresh copies)."""
    return [doc for doc in yaml.safe_load_all(_rendered(kustomization)) if doc]


def everything() -> list[Resource]:
    """The resources of every kustomization, each once (by kind, namespace and name)."""
    seen: dict[tuple[str, str, str], Resource] = {}
    for kustomization in KUSTOMIZATIONS:
        for doc in render(kustomization):
            meta = doc["metadata"]
            seen.setdefault((doc["kind"], meta.get("namespace", ""), meta["name"]), doc)
    return list(seen.values())


def named(resources: list[Resource], kind: str, name: str) -> Resource:
    """The one resource of ``kind`` called ``name`` among ``resources``."""
    found = [r for r in resources if r["kind"] == kind and r["metadata"]["name"] == name]
    assert len(found) == 1, f"{kind} {name}: {len(found)} rendered"
    return found[0]


@dataclass(frozen=True)
class DaemonContainer:
    """The daemon's container in a rendered workload, with the pod spec around it."""

    kustomization: str
    workload: Resource  # the Pod or StatefulSet
    pod_spec: dict[str, Any]
    pod_labels: dict[str, str]
    container: dict[str, Any]

    @property
    def name(self) -> str:
        return f"{self.kustomization}:{self.workload['kind']}/{self.workload['metadata']['name']}"

    def layout(self) -> list[Resource]:
        """What is applied with the daemon: its kustomization's resources, or for a driver pod
        template (rendered into a file for Spark), those of the kustomization above it."""
        if self.workload["kind"] == "Pod":
            return render(self.kustomization.rsplit("/", 1)[0])
        return render(self.kustomization)

    def port(self, name_or_number: str | int) -> int:
        """A containerPort by name (or a number, checked to be declared)."""
        for port in self.container.get("ports", []):
            if name_or_number in (port.get("name"), port["containerPort"]):
                return int(port["containerPort"])
        raise AssertionError(f"{self.name}: no container port {name_or_number!r}")

    def volume(self, name: str) -> dict[str, Any]:
        """The pod's volume ``name``, or a StatefulSet's claim template of that name."""
        found: list[dict[str, Any]] = [v for v in self.pod_spec.get("volumes", []) if v["name"] == name]
        claims = (
            self.workload["spec"].get("volumeClaimTemplates", []) if self.workload["kind"] != "Pod" else []
        )
        found += [
            {"name": name, "volumeClaimTemplate": claim}
            for claim in claims
            if claim["metadata"]["name"] == name
        ]
        assert len(found) == 1, f"{self.name}: volume {name!r} defined {len(found)} times"
        return found[0]


def daemon_containers() -> Iterator[DaemonContainer]:
    """Every container running the epochstate image, in every kustomization's workloads."""
    for kustomization in KUSTOMIZATIONS:
        for doc in render(kustomization):
            if doc["kind"] == "Pod":
                spec, labels = doc["spec"], doc["metadata"].get("labels", {})
            elif doc["kind"] in ("StatefulSet", "Deployment", "DaemonSet"):
                template = doc["spec"]["template"]
                spec, labels = template["spec"], template["metadata"].get("labels", {})
            else:
                continue
            for container in [*spec.get("initContainers", []), *spec.get("containers", [])]:
                if container.get("image", "").split(":")[0].rsplit("/", 1)[-1] == "epochstate":
                    yield DaemonContainer(kustomization, doc, spec, labels, container)


@dataclass(frozen=True)
class Image:
    """What the Dockerfile's final stage gives a container: entry point, command, environment."""

    entrypoint: list[str]
    cmd: list[str]
    env: dict[str, str]
    user: str
    exposed: set[int]
    healthcheck: list[str]


def _instructions(text: str) -> list[tuple[str, str]]:
    """The Dockerfile's instructions (keyword, rest), continuation lines joined, comments gone."""
    joined: list[str] = []
    current = ""
    for line in text.splitlines():
        stripped = line.strip()
        if not current and (not stripped or stripped.startswith("#")):
            continue
        if stripped.startswith("#"):
            continue
        if stripped.endswith("\\"):
            current += stripped[:-1] + " "
            continue
        joined.append(current + stripped)
        current = ""
    found = []
    for instruction in joined:
        keyword, _, rest = instruction.partition(" ")
        found.append((keyword.upper(), rest.strip()))
    return found


def image() -> Image:
    instructions = _instructions(DOCKERFILE.read_text())
    last_from = max(i for i, (keyword, _) in enumerate(instructions) if keyword == "FROM")
    final = instructions[last_from:]
    entrypoint: list[str] = []
    cmd: list[str] = []
    env: dict[str, str] = {}
    user = ""
    exposed: set[int] = set()
    healthcheck: list[str] = []
    for keyword, rest in final:
        if keyword == "ENTRYPOINT":
            entrypoint = json.loads(rest)
        elif keyword == "CMD":
            cmd = json.loads(rest)
        elif keyword == "ENV":
            for pair in rest.split():
                name, _, value = pair.partition("=")
                env[name] = value
        elif keyword == "USER":
            user = rest
        elif keyword == "EXPOSE":
            exposed |= {int(port.split("/")[0]) for port in rest.split()}
        elif keyword == "HEALTHCHECK":
            healthcheck = json.loads(rest[rest.index("CMD") + 3 :].strip())
    return Image(entrypoint, cmd, env, user, exposed, healthcheck)
