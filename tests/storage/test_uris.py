"""Checkpoint URIs onto fsspec filesystems: the mapping of every scheme, the Hadoop
configuration WebHDFS reads, and URIs with credentials refused and never echoed."""

from __future__ import annotations

from pathlib import Path

import pytest

from epochstate.core.storage.errors import UnsupportedLocation
from epochstate.core.storage.hadoop import webhdfs_options
from epochstate.core.storage.uris import parse_remote, redact

ENV = {"HADOOP_USER_NAME": "reader"}


@pytest.mark.parametrize(
    ("uri", "protocol", "path", "shown"),
    [
        ("s3a://bucket/cp/orders/", "s3", "bucket/cp/orders", "s3a://bucket/cp/orders/commits/0"),
        ("s3://bucket/cp", "s3", "bucket/cp", "s3://bucket/cp/commits/0"),
        ("gs://bucket/cp", "gcs", "bucket/cp", "gs://bucket/cp/commits/0"),
        (
            "abfss://box@acct.dfs.core.windows.net/cp",
            "abfs",
            "box/cp",
            "abfss://box@acct.dfs.core.windows.net/cp/commits/0",
        ),
        ("abfs://box/cp", "abfs", "box/cp", "abfs://box/cp/commits/0"),
        ("hdfs://nn.example:8020/cp", "webhdfs", "/cp", "hdfs://nn.example:8020/cp/commits/0"),
        ("webhdfs://nn.example:50070/cp", "webhdfs", "/cp", "webhdfs://nn.example:50070/cp/commits/0"),
    ],
)
def test_each_scheme_maps_to_its_filesystem(uri: str, protocol: str, path: str, shown: str) -> None:
    target = parse_remote(uri, ENV)
    assert (target.protocol, target.path) == (protocol, path)
    assert target.display(f"{path}/commits/0") == shown


def test_azure_reads_the_accounts_blob_endpoint_in_its_cloud() -> None:
    china = parse_remote("abfss://box@acct.dfs.core.chinacloudapi.cn/cp", ENV)
    assert dict(china.options) == {"account_name": "acct", "account_host": "acct.blob.core.chinacloudapi.cn"}
    with pytest.raises(UnsupportedLocation, match="connects to account 'other'"):
        parse_remote(
            "abfss://box@acct.dfs.core.windows.net/cp",
            {"AZURE_STORAGE_CONNECTION_STRING": "AccountName=other;AccountKey=aGVsbG8=;"},
        )


def test_webhdfs_address_user_and_kerberos_come_from_hadoops_configuration(tmp_path: Path) -> None:
    assert webhdfs_options("hdfs", "nn", 8020, ENV) == {
        "host": "nn",
        "port": 9870,
        "use_https": False,
        "user": "reader",
    }
    assert webhdfs_options("swebhdfs", "nn", None, ENV)["port"] == 9871
    site = "<configuration>{}</configuration>"
    prop = "<property><name>{}</name><value>{}</value></property>"
    (tmp_path / "hdfs-site.xml").write_text(
        site.format(
            prop.format("dfs.namenode.https-address", "0.0.0.0:50470")
            + prop.format("dfs.http.policy", "HTTPS_ONLY")
            + prop.format("dfs.nameservices", "prod")
        )
    )
    kerberos = prop.format("hadoop.security.authentication", "kerberos")
    (tmp_path / "core-site.xml").write_text(site.format(kerberos))
    env = {**ENV, "HADOOP_CONF_DIR": str(tmp_path)}
    assert webhdfs_options("hdfs", "nn", 8020, env) == {
        "host": "nn",
        "port": 50470,
        "use_https": True,
        "kerberos": True,
    }
    with pytest.raises(UnsupportedLocation, match="HA nameservice"):
        webhdfs_options("hdfs", "prod", None, env)


@pytest.mark.parametrize(
    "uri",
    [
        "s3a://AKIAEXAMPLE:s3cr3t-value@bucket/cp",
        "gs://user:s3cr3t-value@bucket/cp",
        "abfss://box:s3cr3t-value@acct.dfs.core.windows.net/cp",
        "abfss://box@acct.dfs.core.windows.net/cp?sv=2024&sig=s3cr3t-value",
        "hdfs://user:s3cr3t-value@nn:8020/cp",
    ],
)
def test_credentials_in_a_uri_are_refused_without_being_echoed(uri: str) -> None:
    assert "s3cr3t-value" not in redact(uri)
    with pytest.raises(UnsupportedLocation, match="credentials or a query") as refused:
        parse_remote(uri, ENV)
    assert "s3cr3t-value" not in str(refused.value)


def test_redact_leaves_plain_uris_alone() -> None:
    for uri in (
        "s3a://bucket/cp",
        "abfss://box@acct.dfs.core.windows.net/cp",
        "/local/cp",
        "hdfs://nn:8020/cp",
    ):
        assert redact(uri) == uri
