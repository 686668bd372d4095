"""HDFS through WebHDFS: where a NameNode's HTTP server is, and as whom to ask it.

``hdfs://namenode:8020/path`` names the NameNode's RPC port, which only a JVM client
speaks; the daemon reads the same files over the NameNode's WebHDFS REST API. The
answers come from the standard Hadoop client configuration and nothing else:

- the HTTP address: ``dfs.namenode.http-address`` (``https-address`` under
  ``dfs.http.policy=HTTPS_ONLY``) in ``$HADOOP_CONF_DIR/hdfs-site.xml`` when it names
  this NameNode, else Hadoop 3's default port (9870, HTTPS 9871). ``webhdfs://`` and
  ``swebhdfs://`` URIs name the HTTP port themselves, as in Hadoop;
- the user: Kerberos (SPNEGO from the ticket cache) when ``core-site.xml`` says
  ``hadoop.security.authentication=kerberos``; else ``HADOOP_USER_NAME``, else the
  login user, as Hadoop's simple authentication does.

An HA nameservice (a logical name in ``dfs.nameservices``) is refused: WebHDFS has
no client-side failover here, so name the active NameNode or an HttpFS gateway.
"""

from __future__ import annotations

import getpass
import os
import xml.etree.ElementTree as ElementTree
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from epochstate.core.storage.errors import UnsupportedLocation

HTTP_PORT = 9870
HTTPS_PORT = 9871
_WILDCARDS = ("", "0.0.0.0", "::", "[::]")


def webhdfs_options(
    scheme: str, host: str, port: int | None, environ: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """fsspec ``webhdfs`` options for a ``hdfs``, ``webhdfs`` or ``swebhdfs`` URI's host and port.

    Raises:
        UnsupportedLocation: no host, or the host is an HA nameservice.
    """
    env = os.environ if environ is None else environ
    if not host:
        raise UnsupportedLocation(f"{scheme}:// needs a NameNode host ({scheme}://namenode:port/path)")
    conf = _site(env, "core-site.xml") | _site(env, "hdfs-site.xml")
    https = scheme == "swebhdfs"
    if scheme == "hdfs":
        if host in conf.get("dfs.nameservices", "").split(","):
            raise UnsupportedLocation(
                f"hdfs://{host}: an HA nameservice; WebHDFS needs one NameNode: give the active "
                f"NameNode's address (webhdfs://namenode:{HTTP_PORT}/path) or an HttpFS gateway"
            )
        https = conf.get("dfs.http.policy", "HTTP_ONLY").upper() == "HTTPS_ONLY"
        port = _configured_port(conf.get(f"dfs.namenode.{'https' if https else 'http'}-address", ""), host)
    options: dict[str, Any] = {
        "host": host,
        "port": port or (HTTPS_PORT if https else HTTP_PORT),
        "use_https": https,
    }
    if conf.get("hadoop.security.authentication", "simple").lower() == "kerberos":
        options["kerberos"] = True
    else:
        options["user"] = env.get("HADOOP_USER_NAME") or _login_user()
    return options


def _configured_port(address: str, host: str) -> int | None:
    configured_host, _, port = address.rpartition(":")
    if port.isdigit() and configured_host in (host, *_WILDCARDS):
        return int(port)
    return None


def _site(env: Mapping[str, str], name: str) -> dict[str, str]:
    directory = env.get("HADOOP_CONF_DIR")
    if not directory:
        return {}
    path = Path(directory) / name
    try:
        root = ElementTree.parse(path).getroot()
    except FileNotFoundError:
        return {}
    except (OSError, ElementTree.ParseError) as error:
        raise UnsupportedLocation(f"{path}: {error}") from None
    found = {}
    for prop in root.iter("property"):
        key, value = prop.findtext("name"), prop.findtext("value")
        if key and value is not None:
            found[key.strip()] = value.strip()
    return found


def _login_user() -> str | None:
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # no passwd entry (a container's arbitrary uid)
        return None
