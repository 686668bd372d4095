"""A rendered container, run the way a kubelet would run it, as a local process.

What is the pod's becomes local, and nothing else changes:

* the filesystem: every ``volumeMounts[].mountPath`` lives under a fresh root directory
  (ConfigMap keys written as files, Secrets from what the test provides, emptyDirs and
  claims empty); every path in the arguments, the environment and the mounted files that
  names a mount is moved under that root;
* the network: each ``containerPort`` becomes a free port on this machine, in every
  ``host:port``, and in a variable whose value is the port alone;
* the downward API: ``metadata.name``, ``metadata.namespace`` and ``status.podIP`` (127.0.0.1);
* the image: its ``ENTRYPOINT``, ``CMD`` and ``ENV`` from the Dockerfile, ``epochstate`` being
  this environment's entry point.

Variables are expanded as the kubelet does (``$(NAME)`` of a variable defined before it,
``$$`` a literal dollar).
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.deploy.manifests import DaemonContainer, Image, named

FIELDS = {"metadata.name": "pod-0", "metadata.namespace": "default", "status.podIP": "127.0.0.1"}
_REFERENCE = re.compile(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)")


def expand(value: str, defined: Mapping[str, str]) -> str:
    """``value`` with ``$(NAME)`` of ``defined`` replaced and ``$$`` made ``$`` (undefined names stay)."""

    def replace(match: re.Match[str]) -> str:
        if match.group(0) == "$$":
            return "$"
        return defined.get(match.group(1), match.group(0))

    return _REFERENCE.sub(replace, value)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@dataclass
class LocalPod:
    """One container of a pod spec, laid out under ``root`` and run by :meth:`start`."""

    daemon: DaemonContainer
    image: Image
    secrets: Mapping[str, Mapping[str, bytes]]  # Secret name -> key -> content
    config_edit: Callable[[str, str], str] = lambda name, text: text  # (ConfigMap key, text) -> text
    env_edit: Callable[[str, str], str] = lambda name, value: value  # (variable, value) -> value
    root: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="pod-", dir="/tmp")))
    ports: dict[int, int] = field(default_factory=dict)  # containerPort -> local port
    process: subprocess.Popen[bytes] | None = None

    def __post_init__(self) -> None:
        # A short root: the Unix socket path must stay under 108 bytes.
        for port in self.daemon.container.get("ports", []):
            self.ports[int(port["containerPort"])] = free_port()
        self._mounts = sorted(
            (m["mountPath"] for m in self.daemon.container.get("volumeMounts", [])), key=len, reverse=True
        )
        # A mount path where a path starts (line start, after a blank, a quote, '=', ',', '[',
        # ':', or the '//' of unix:///path) up to where it ends: one pass, so a path moved under
        # the root is never moved again.
        alternatives = "|".join(re.escape(mount) for mount in self._mounts)
        self._mount_pattern = re.compile(
            rf"(?:^|(?<=[\s\"'=,\[:])|(?<=//))({alternatives})(?=$|[/\s\"',\]])", re.M
        )

    def path(self, in_pod: str) -> Path:
        """Where a path of the pod lives here."""
        return self.root / in_pod.lstrip("/")

    def local(self, text: str) -> str:
        """``text`` with mount paths moved under the root and container ports made local."""
        if self._mounts:
            text = self._mount_pattern.sub(lambda match: str(self.path(match.group(1))), text)
        if text.isdigit() and int(text) in self.ports:
            return str(self.ports[int(text)])
        if self.ports:
            numbers = "|".join(str(port) for port in self.ports)
            text = re.sub(
                rf"(?<=:)({numbers})(?!\d)", lambda match: str(self.ports[int(match.group(1))]), text
            )
        return text

    def lay_out(self) -> None:
        """Make every mounted volume under the root."""
        for mount in self.daemon.container.get("volumeMounts", []):
            target = self.path(mount["mountPath"])
            target.mkdir(parents=True, exist_ok=True)
            volume = self.daemon.volume(mount["name"])
            if "configMap" in volume:
                config = named(self.daemon.layout(), "ConfigMap", volume["configMap"]["name"])
                for key, text in config["data"].items():
                    (target / key).write_text(self.local(self.config_edit(key, text)))
            elif "secret" in volume:
                name = volume["secret"]["secretName"]
                assert name in self.secrets, f"the test gives no Secret {name}"
                for key, content in self.secrets[name].items():
                    (target / key).write_bytes(content)
                    (target / key).chmod(volume["secret"].get("defaultMode", 0o644))
            else:
                assert {"emptyDir", "persistentVolumeClaim", "volumeClaimTemplate"} & volume.keys(), volume

    def environment(self) -> dict[str, str]:
        """The container's environment: the image's, then the container's, expanded and made local."""
        env = dict(self.image.env)
        for source in self.daemon.container.get("envFrom", []):
            reference = source.get("secretRef") or source.get("configMapRef") or {}
            assert reference.get("optional") is True, f"envFrom {reference} must be given: {source}"
        for variable in self.daemon.container.get("env", []):
            if "valueFrom" in variable:
                value = FIELDS[variable["valueFrom"]["fieldRef"]["fieldPath"]]
            else:
                value = expand(variable.get("value", ""), env)
            env[variable["name"]] = self.env_edit(variable["name"], self.local(value))
        return env

    def argv(self) -> list[str]:
        command = self.daemon.container.get("command") or self.image.entrypoint
        args = self.daemon.container.get(
            "args", self.image.cmd if "command" not in self.daemon.container else []
        )
        env = self.environment()
        argv = [self.local(expand(a, env)) for a in [*command, *args]]
        entry = Path(sys.executable).parent / argv[0]
        assert entry.exists(), f"{argv[0]} is not installed in this environment"
        return [str(entry), *argv[1:]]

    def process_env(self) -> dict[str, str]:
        """What the process runs with: PATH of this machine, no EPOCHSTATE_* of the test's."""
        base = {k: v for k, v in os.environ.items() if not k.startswith(("EPOCHSTATE_", "GRPC_"))}
        # The image's user has no home directory: nothing may be written there.
        env = {**base, "HOME": "/nonexistent", **self.environment()}
        if "/tmp" in self._mounts:
            env["TMPDIR"] = str(self.path("/tmp"))
        return env

    def start(self, log: Path) -> None:
        self.lay_out()
        with log.open("ab") as out:
            self.process = subprocess.Popen(
                self.argv(), stdout=out, stderr=subprocess.STDOUT, env=self.process_env(), cwd=self.root
            )

    def written_outside_mounts(self) -> list[str]:
        """Files under the root but outside every mount: what a read-only root would refuse."""
        mounts = [self.path(m) for m in self._mounts]
        return sorted(
            str(path.relative_to(self.root))
            for path in self.root.rglob("*")
            if not path.is_dir() and not any(path.is_relative_to(m) for m in mounts)
        )

    def stop(self) -> int | None:
        if self.process is None:
            return None
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)
        return self.process.returncode

    def close(self) -> None:
        self.stop()
        shutil.rmtree(self.root, ignore_errors=True)

    def probe_port(self, port: Any) -> int:
        """The local port of a probe's or monitor's port (a number or a name)."""
        return self.ports[self.daemon.port(port)]
