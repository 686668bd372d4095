"""Checkpoint URIs as users give them to Spark, mapped onto fsspec filesystems.

| URI | fsspec | its path |
| --- | --- | --- |
| ``s3a://bucket/p`` (``s3``, ``s3n``) | ``s3`` (s3fs) | ``bucket/p`` |
| ``gs://bucket/p`` (``gcs``) | ``gcs`` (gcsfs) | ``bucket/p`` |
| ``abfs[s]://container@account.dfs.core.windows.net/p`` | ``abfs`` (adlfs, Blob API) | ``container/p`` |
| ``hdfs://namenode:8020/p``, ``[s]webhdfs://namenode:9870/p`` | ``webhdfs`` | ``/p`` |

Credentials never travel in a URI: one with a password or token in it (a Hadoop
``s3a://key:secret@bucket`` form, a SAS query) is refused, and every message shows
the URI through :func:`redact`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote, urlsplit

from epochstate.core.storage.errors import UnsupportedLocation
from epochstate.core.storage.hadoop import webhdfs_options

# Hadoop's scheme -> fsspec's protocol.
PROTOCOLS = {
    "s3": "s3",
    "s3a": "s3",
    "s3n": "s3",
    "gs": "gcs",
    "gcs": "gcs",
    "abfs": "abfs",
    "abfss": "abfs",
    "hdfs": "webhdfs",
    "webhdfs": "webhdfs",
    "swebhdfs": "webhdfs",
}
_AZURE_HOST = ".dfs."


@dataclass(frozen=True)
class RemoteTarget:
    """Where a remote URI points: the fsspec filesystem (``protocol`` and its
    ``options``), the path on it, and the authority its paths display under."""

    scheme: str
    protocol: str
    path: str
    options: Mapping[str, Any] = field(default_factory=dict)
    # abfs: the "account host" a container's paths show with; hdfs: "namenode:port".
    authority: str = ""

    def display(self, path: str) -> str:
        """A path of this filesystem as the user would write it."""
        if self.protocol == "abfs" and self.authority:
            container, _, rest = path.partition("/")
            return f"{self.scheme}://{container}@{self.authority}/{rest}".rstrip("/")
        if self.protocol == "webhdfs":
            return f"{self.scheme}://{self.authority}{path}"
        return f"{self.scheme}://{path}"


def redact(uri: str) -> str:
    """``uri`` fit for a message or a log: any password or token in its user info and
    its whole query (SAS tokens, signed URLs) replaced by ``***``."""
    if "://" not in uri:
        return uri
    scheme, rest = uri.split("://", 1)
    authority, slash, tail = rest.partition("/")
    userinfo, at, host = authority.rpartition("@")
    if at and ":" in userinfo:
        authority = f"{userinfo.split(':', 1)[0]}:***@{host}"
    elif at and scheme not in ("abfs", "abfss", "wasb", "wasbs"):
        authority = f"***@{host}"
    path, query, _ = tail.partition("?")
    if query:
        path += "?***"
    elif "?" in authority:
        authority = authority.split("?", 1)[0] + "?***"
    return f"{scheme}://{authority}{slash}{path}"


def parse_remote(uri: str, environ: Mapping[str, str] | None = None) -> RemoteTarget:
    """The filesystem and path a remote URI names (see the module's table).

    Raises:
        UnsupportedLocation: an unknown scheme; credentials or a query in the URI; no
            bucket, container or host; an HDFS HA nameservice.
    """
    env = os.environ if environ is None else environ
    parts = urlsplit(uri)
    scheme = parts.scheme.lower()
    shown = redact(uri)
    protocol = PROTOCOLS.get(scheme)
    if protocol is None:
        raise UnsupportedLocation(f"checkpoint {shown!r}: unsupported scheme {parts.scheme!r}")
    if parts.password is not None or parts.query or (parts.username and protocol != "abfs"):
        raise UnsupportedLocation(
            f"checkpoint {shown!r}: credentials or a query in the URI are not accepted; "
            "credentials come from the environment (see Operations: checkpoints on object stores)"
        )
    path = unquote(parts.path).rstrip("/")
    if protocol == "webhdfs":
        host = parts.hostname or ""
        options = webhdfs_options(scheme, host, parts.port, env)
        return RemoteTarget(scheme, protocol, path or "/", options, parts.netloc)
    if protocol == "abfs":
        return _azure(uri, scheme, parts.netloc, path, env)
    if not parts.netloc:
        raise UnsupportedLocation(f"checkpoint {shown!r}: no bucket")
    return RemoteTarget(scheme, protocol, f"{parts.netloc}{path}")


def _azure(uri: str, scheme: str, netloc: str, path: str, env: Mapping[str, str]) -> RemoteTarget:
    container, at, host = netloc.rpartition("@")
    if not at:
        # abfs://container/path: the account comes from the environment alone.
        return RemoteTarget(scheme, "abfs", f"{netloc}{path}")
    if not container or not host:
        raise UnsupportedLocation(
            f"checkpoint {redact(uri)!r}: expected {scheme}://container@account.dfs.core.windows.net/path"
        )
    account = host.split(".", 1)[0]
    options = {"account_name": account}
    if _AZURE_HOST in host:
        # The Blob endpoint of the same account (adlfs reads through the Blob API),
        # in whichever cloud the host names (core.windows.net, chinacloudapi.cn, ...).
        options["account_host"] = host.replace(_AZURE_HOST, ".blob.", 1)
    connected = _connection_string_account(env.get("AZURE_STORAGE_CONNECTION_STRING", ""))
    if connected and connected != account:
        raise UnsupportedLocation(
            f"checkpoint {redact(uri)!r} is in account {account!r}, but "
            f"AZURE_STORAGE_CONNECTION_STRING connects to account {connected!r}"
        )
    return RemoteTarget(scheme, "abfs", f"{container}{path}", options, host)


def _connection_string_account(connection_string: str) -> str:
    for part in connection_string.split(";"):
        key, _, value = part.partition("=")
        if key.strip().lower() == "accountname":
            return value.strip()
    return ""
