"""Daemon settings: defaults, then a YAML/JSON config file, then environment.

Environment variables are ``EPOCHSTATE_<FIELD>`` (``EPOCHSTATE_LISTEN=0.0.0.0:7070``,
``EPOCHSTATE_LISTEN_UNIX=""`` for no Unix socket); jobs can be given as JSON in
``EPOCHSTATE_JOBS``; a field of a section after a double underscore
(``EPOCHSTATE_TLS__CERT=/etc/epochstate/tls.crt``, ``EPOCHSTATE_AUTH__ENABLED=true``).
Settings that would serve beyond loopback without TLS and auth are refused
(:func:`~epochstate.daemon.security_config.exposure_problem`) unless ``insecure``.
"""

from __future__ import annotations

import json
import socket
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, Field, ValidationError, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from epochstate.core.errors import EpochStateError
from epochstate.core.storage.location import redact
from epochstate.daemon.security_config import AuthSettings, TlsSettings, exposure_problem


class ConfigError(EpochStateError):
    """A config file or environment variable that cannot be used."""


class JobConfig(BaseModel):
    """A job to follow from start-up."""

    name: str = Field(min_length=1)
    checkpoint: str = Field(min_length=1)

    @field_validator("checkpoint")
    @classmethod
    def _no_credentials(cls, checkpoint: str) -> str:
        # Refused here, before the URI can reach a log line, ZooKeeper or a message.
        if redact(checkpoint) != checkpoint:
            raise ValueError(
                "credentials or a query in the URI are not accepted; they come from the environment"
            )
        return checkpoint


class DaemonSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="EPOCHSTATE_", extra="forbid", env_nested_delimiter="__")

    node: str = Field(default_factory=socket.gethostname, description="this node's name in ZooKeeper")
    listen: str = Field(default="127.0.0.1:7070", description="gRPC listen address host:port")
    listen_unix: str = Field(
        default="epochstate.sock",
        description="gRPC Unix socket for clients on this node; relative to data_dir; '': none",
    )
    advertise: str | None = Field(default=None, description="address others use; default: listen")
    data_dir: Path = Field(default=Path("var/epochstate"), description="where the RocksDB store lives")
    zookeeper: str | None = Field(default=None, description="ZooKeeper connect string; None: no registry")
    zookeeper_root: str = "/epochstate"
    zookeeper_session_timeout: float = 10.0
    retention_epochs: int = Field(default=100, ge=1)
    ingest_known_keys: int = Field(
        default=1_000_000,
        ge=1,
        description="keys per store whose newest version ingest remembers (~100 bytes each); "
        "changes to other keys cost a RocksDB seek each",
    )
    sync_writes: bool = Field(
        default=True,
        description="fsync the store's write-ahead log with each ingested epoch before it is queryable "
        "or announced in ZooKeeper, so a power loss never takes back an epoch; false: faster ingest, "
        "and a power loss may lose recent epochs (ingested again from the checkpoint)",
    )
    poll_interval: float = Field(default=0.1, gt=0, description="seconds between looks at a checkpoint")
    poll_max_interval: float = Field(
        default=5.0,
        gt=0,
        description="an idle job on an object store is looked at ever less often, down to once in this "
        "many seconds (one LIST request); the listener's push brings a commit at once",
    )
    checkpoint_cache_bytes: int = Field(
        default=2 << 30,
        ge=1 << 20,
        description="bytes of remote checkpoint files (snapshot zips, table files) kept on local disk "
        "under data_dir/cache",
    )
    metrics_port: int | None = Field(default=None, description="Prometheus metrics on this port")
    grpc_workers: int = Field(default=16, ge=1)
    shutdown_grace: float = Field(default=5.0, ge=0)
    jobs: list[JobConfig] = Field(default_factory=list)
    tls: TlsSettings = Field(default_factory=TlsSettings)
    auth: AuthSettings = Field(default_factory=AuthSettings)
    insecure: bool = Field(
        default=False, description="serve beyond loopback even without TLS and auth (never in production)"
    )

    @property
    def advertised(self) -> str:
        return self.advertise or self.listen

    @property
    def unix_socket(self) -> Path | None:
        """Where the Unix socket listener binds (None: no such listener)."""
        if not self.listen_unix:
            return None
        return (self.data_dir / self.listen_unix).absolute()


def _deep_merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    """``base`` with ``over``'s values; a section (``tls``, ``auth``) merged field by field."""
    merged = dict(base)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = _deep_merge(merged[key], value)
        else:
            merged[key] = value
    return merged


def load_settings(path: Path | None = None, **overrides: Any) -> DaemonSettings:
    """Settings from ``path`` (YAML or JSON), environment and ``overrides`` (highest)."""
    from_file: dict[str, Any] = {}
    if path is not None:
        try:
            text = path.read_text()
        except OSError as error:
            raise ConfigError(f"cannot read config file {path}: {error.strerror}") from error
        try:
            loaded = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
        except (yaml.YAMLError, json.JSONDecodeError) as error:
            raise ConfigError(f"config file {path} is not valid YAML/JSON: {error}") from error
        if loaded is None:
            loaded = {}
        if not isinstance(loaded, dict):
            raise ConfigError(f"config file {path} must hold a mapping, not {type(loaded).__name__}")
        from_file = loaded
    try:
        env = DaemonSettings()
        merged = _deep_merge(from_file, env.model_dump(exclude_unset=True))
        merged.update({k: v for k, v in overrides.items() if v is not None})
        settings = DaemonSettings(**merged)
    except ValidationError as error:
        problems = "; ".join(f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in error.errors())
        raise ConfigError(f"invalid settings: {problems}") from error
    problem = exposure_problem(settings.listen, settings.tls, settings.auth, settings.insecure)
    if problem is not None:
        raise ConfigError(problem)
    return settings
