"""Daemon settings: defaults, then a YAML/JSON config file, then environment.

Environment variables are ``EPOCHSTATE_<FIELD>`` (``EPOCHSTATE_LISTEN=0.0.0.0:7070``,
``EPOCHSTATE_LISTEN_UNIX=""`` for no Unix socket, ``EPOCHSTATE_LIMIT_STREAMS=256``);
jobs can be given as JSON in ``EPOCHSTATE_JOBS``; a field of a section after a
double underscore (``EPOCHSTATE_TLS__CERT=/etc/epochstate/tls.crt``,
``EPOCHSTATE_AUTH__ENABLED=true``). The call limits stay flat ``limit_<kind>``
fields (one factory, :func:`_call_limit`), not a section: a section would rename
the variables and keys deployments already set.
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
from epochstate.core.zookeeper.errors import InvalidName
from epochstate.core.zookeeper.layout import check_name
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


LIMIT_PREFIX = "limit_"


def _call_limit(default: int, calls: str) -> Any:
    """The field of a ``limit_<kind>`` setting: how many ``calls`` of one kind (the kinds of
    ``epochstate.daemon.server.limits``) may run at once."""
    return Field(
        default=default,
        ge=1,
        description=f"concurrent {calls}; more are refused RESOURCE_EXHAUSTED (TOO_MANY_CALLS)",
    )


class ServeSettings(BaseModel):
    """How the daemon serves gRPC calls (docs/operations.md, "Serving processes")."""

    processes: int = Field(
        default=0,
        ge=0,
        description="gRPC serving processes sharing the TCP port (the main one included; the others "
        "read through secondaries of the store); 0: as many as the CPUs the daemon may use",
    )


class DaemonSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="EPOCHSTATE_", extra="forbid", env_nested_delimiter="__")

    node: str = Field(default_factory=socket.gethostname, description="this node's name in ZooKeeper")
    listen: str = Field(default="127.0.0.1:7070", description="gRPC listen address host:port")
    listen_unix: str = Field(
        default="epochstate.sock",
        description="gRPC Unix socket for clients on this node; relative to data_dir; '': none",
    )
    advertise: str | None = Field(
        default=None,
        description="host:port others reach this daemon at, registered in ZooKeeper (in Kubernetes the "
        "pod's IP or stable name from the downward API); default: the bound listen address",
    )
    health_listen: str | None = Field(
        default=None,
        description="host:port of a plaintext listener that serves grpc.health.v1 Check only, for "
        "probes that cannot speak TLS (the kubelet's gRPC probe); None: none",
    )
    data_dir: Path = Field(default=Path("var/epochstate"), description="where the RocksDB store lives")
    zookeeper: str | None = Field(default=None, description="ZooKeeper connect string; None: no registry")
    zookeeper_root: str = "/epochstate"
    zookeeper_session_timeout: float = 10.0
    zookeeper_auth_file: Path | None = Field(
        default=None,
        description="file holding one line user:password (a mounted secret): the ZooKeeper digest identity "
        "the daemon authenticates as and gives sole rights on every znode it creates; none: no "
        "authentication, znodes open to anyone (docs/zookeeper.md)",
    )
    group: str | None = Field(
        default=None,
        description="join this group of daemons (needs zookeeper): follow the jobs its leader assigns, "
        "besides the jobs of this config (docs/groups.md); None: no group",
    )
    group_status_interval: float = Field(
        default=1.0, gt=0, description="seconds between updates of this member's replica status znode"
    )
    retention_epochs: int = Field(default=100, ge=1)
    ingest_known_keys: int = Field(
        default=16_000_000,
        ge=1,
        description="keys per store whose newest version ingest remembers (~16 bytes each, only as many "
        "as the store has); a store with more forgets them and each changed key costs a RocksDB seek",
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
    ingest_retry_interval: float = Field(
        default=2.0,
        gt=0,
        description="seconds before ingest tries again an epoch that failed (a damaged or refused file, "
        "a storage that does not answer); an epoch with a damaged or refused file is given up after three"
        " tries",
    )
    checkpoint_cache_bytes: int = Field(
        default=2 << 30,
        ge=1 << 20,
        description="bytes of remote checkpoint files (snapshot zips, table files) kept on local disk "
        "under data_dir/cache",
    )
    s3_request_timeout: float = Field(
        default=30.0,
        gt=0,
        description="seconds one request to an S3 checkpoint may take, its body included; a request "
        "past it is abandoned and retried like any transient fault (within at least twice this time)",
    )
    metrics_port: int | None = Field(default=None, description="Prometheus metrics on this port")
    metrics_address: str = Field(
        default="127.0.0.1",
        description="address the Prometheus metrics server binds (0.0.0.0: every interface)",
    )
    grpc_workers: int = Field(
        default=16,
        ge=1,
        description="gRPC server threads beyond the per-kind call limits below: for health checks, "
        "reflection and refusing calls past a limit (the pool holds the sum of the limits plus these)",
    )
    quick_threads: int = Field(
        default=16,
        ge=0,
        description="threads of each serving process that run calls not known to last (reads that "
        "never wait, health checks; more such calls wait for one of them); the calls that last get "
        "threads of their own (0: one thread for every call the limits admit, the pool before)",
    )
    limit_unary_reads: int = _call_limit(
        64,
        "reads that never wait (Get/MultiGet/Scan of an exact or the latest epoch, ListJobs, "
        "DescribeJob, ListEpochs)",
    )
    limit_waiting_reads: int = _call_limit(
        128, "reads whose selector may wait (at_least, exact with wait, covers, aligned_with)"
    )
    limit_streams: int = _call_limit(128, "open streams (WatchEpochs, health Watch, reflection)")
    limit_reports: int = _call_limit(32, "ReportEpoch calls")
    limit_admin: int = _call_limit(16, "administration calls (FollowJob, AlignmentAdmin)")
    max_wait: float = Field(
        default=300.0,
        gt=0,
        description="seconds a read without a deadline may wait for its epoch (a Changes stream "
        "with a to_epoch: for each epoch); it then ends DEADLINE_EXCEEDED (EPOCH_WAIT_TIMED_OUT), "
        "as if its deadline had passed",
    )
    max_request_bytes: int = Field(
        default=4 << 20,
        ge=1024,
        description="largest request message accepted; gRPC refuses a larger one RESOURCE_EXHAUSTED",
    )
    max_response_bytes: int = Field(
        default=16 << 20,
        ge=1024,
        description="largest response message sent; a larger answer is refused RESOURCE_EXHAUSTED "
        "(RESPONSE_TOO_LARGE)",
    )
    subject_watch_limit: int = Field(
        default=10_000,
        ge=16,
        description="ZooKeeper znodes of subjects kept cached (each with a watch) for aligned_with "
        "reads; past it the least recently used are evicted",
    )
    ingest_stuck_after: float = Field(
        default=300.0,
        gt=0,
        description="health turns NOT_SERVING when a committed epoch has waited this many seconds "
        "for ingest without any progress (not counting epochs whose files are damaged), or the "
        "ingest loop has not come round for as long",
    )
    shutdown_grace: float = Field(default=5.0, ge=0)
    jobs: list[JobConfig] = Field(default_factory=list)
    serve: ServeSettings = Field(default_factory=ServeSettings)
    tls: TlsSettings = Field(default_factory=TlsSettings)
    auth: AuthSettings = Field(default_factory=AuthSettings)
    insecure: bool = Field(
        default=False, description="serve beyond loopback even without TLS and auth (never in production)"
    )

    @field_validator("group")
    @classmethod
    def _group_name(cls, group: str | None) -> str | None:
        if group is not None:
            try:
                check_name("group", group)
            except InvalidName as error:
                raise ValueError(str(error)) from None
        return group

    @property
    def advertised(self) -> str:
        return self.advertise or self.listen

    @property
    def call_limits(self) -> dict[str, int]:
        """The ``limit_<kind>`` settings by kind (``unary_reads``, ``waiting_reads``, ...)."""
        return {
            name.removeprefix(LIMIT_PREFIX): value for name, value in self if name.startswith(LIMIT_PREFIX)
        }

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
    if settings.group is not None and not settings.zookeeper:
        raise ConfigError("a group (--group) needs ZooKeeper (--zookeeper): its members meet there")
    problem = exposure_problem(settings.listen, settings.tls, settings.auth, settings.insecure)
    if problem is not None:
        raise ConfigError(problem)
    return settings
