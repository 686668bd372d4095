"""``JobsAdmin`` through real daemons: who may call it, which checkpoints it takes, and a daemon
without a group refusing it with its reason (client and CLI)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc
import pytest

from epochstate.client import EpochStateClient
from epochstate.client.errors import (
    CheckpointNotAllowed,
    InvalidArgument,
    JobDefined,
    JobNotDefined,
    NoGroup,
    RoleMissing,
)
from epochstate.client.tls import TlsOptions
from epochstate.core.partition_ranges import LAST_PARTITION
from tests.e2e.test_reads import SCHEMA, counts, orders
from tests.fixtures.certs import Certificates
from tests.fixtures.daemon import DaemonProcess
from tests.fixtures.streams import FileStream
from tests.fixtures.zookeeper import eventually
from tests.server.security.conftest import ROLES, certificates, orders_checkpoint, token_files

__all__ = ["certificates", "orders_checkpoint"]

pytestmark = [pytest.mark.timeout(300)]


def cli(target: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "epochstate.cli", *args, "--target", target],
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_a_daemon_without_a_group_refuses_with_its_reason(
    tmp_path: Path, zk_connect: str, daemon_factory: Callable[..., DaemonProcess]
) -> None:
    for name, zookeeper in (("no-zookeeper", None), ("no-group", zk_connect)):
        daemon = daemon_factory({}, name=name, zookeeper=zookeeper)
        with daemon.client() as client, pytest.raises(NoGroup) as refused:
            client.group_jobs.status()
        assert (refused.value.code, refused.value.reason) == (grpc.StatusCode.FAILED_PRECONDITION, "NO_GROUP")
        done = cli(daemon.target, "jobs", "add", "x", str(tmp_path))
        assert done.returncode == 5, done.stderr
        assert done.stderr.startswith("error:") and "NO_GROUP" in done.stderr and done.stderr.count("\n") == 1
        # Listing the followed jobs works as before, with or without "list".
        for args in (("jobs", "--json"), ("jobs", "list", "--json")):
            listed = cli(daemon.target, *args)
            assert listed.returncode == 0 and json.loads(listed.stdout) == [], listed.stderr


def test_a_group_refuses_a_group_setting_without_zookeeper(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError, match="needs ZooKeeper"):
        DaemonProcess(tmp_path / "d", {}, extra_args=["--group", "g"]).start()


@pytest.mark.spark
def test_only_admins_manage_the_group_and_only_checkpoints_under_the_roots(
    tmp_path: Path,
    certificates: Certificates,
    orders_checkpoint: Path,
    zk_connect: str,
) -> None:
    files = token_files(tmp_path / "tokens")
    config = tmp_path / "daemon.yaml"
    config.write_text(
        json.dumps(
            {
                "tls": {"cert": str(certificates.server.cert), "key": str(certificates.server.key)},
                "auth": {
                    "enabled": True,
                    "roles": ROLES,
                    "tokens": {k: str(v) for k, v in files.items()},
                    "checkpoint_roots": [str(orders_checkpoint.parent)],
                },
                "poll_interval": 0.2,
            }
        )
    )
    daemon = DaemonProcess(
        tmp_path / "d",
        {},
        zookeeper=zk_connect,
        extra_args=["--config", str(config), "--group", "g", "--node", "a"],
        tls=TlsOptions(ca=certificates.ca.pem_path, token_file=files["ops"]),
    ).start()
    try:

        def as_identity(identity: str) -> EpochStateClient:
            tls = TlsOptions(ca=certificates.ca.pem_path, token_file=files[identity])
            return EpochStateClient(daemon.target, timeout=20, tls=tls)

        for identity in ("dashboards", "spark-listener"):
            with as_identity(identity) as client:
                for call in (
                    client.group_jobs.status,
                    lambda c=client: c.group_jobs.add("orders", str(orders_checkpoint)),
                    lambda c=client: c.group_jobs.pause("orders"),
                ):
                    with pytest.raises(RoleMissing):
                        call()
        with as_identity("ops") as ops:
            with pytest.raises(CheckpointNotAllowed):
                ops.group_jobs.add("elsewhere", str(tmp_path / "elsewhere"))
            with pytest.raises(JobNotDefined):
                ops.group_jobs.pause("orders")
            added = ops.group_jobs.add("orders", str(orders_checkpoint))
            assert (added.name, added.replicas, added.state, added.version) == ("orders", 1, "running", 0)
            with pytest.raises(JobDefined):
                ops.group_jobs.add("orders", str(orders_checkpoint))

            # The one member follows it, catches up (epochs 0 and 1) and says so.
            def following() -> bool:
                (job,) = ops.group_jobs.status().jobs
                return [(r.node, r.state, r.newest_epoch, r.lag_epochs) for r in job.replicas] == [
                    ("a", "following", 1, 0)
                ]

            assert eventually(following, 120), ops.group_jobs.status()
    finally:
        daemon.stop()


@pytest.mark.spark
def test_config_jobs_stay_standalone_beside_the_group(
    spark: Any,
    tmp_path: Path,
    zk_connect: str,
    daemon_factory: Callable[..., DaemonProcess],
) -> None:
    """A job of the daemon's config is followed as before and is not the group's: a group job of
    the same name is not followed there (its replica fails, saying why) and pausing it does not
    pause the config job; another group job is followed."""
    stream = FileStream(spark, tmp_path / "in", tmp_path / "cp" / "orders", counts, SCHEMA, name="orders")
    stream.start()
    try:
        stream.feed(orders(0))
    finally:
        stream.stop()
    checkpoint = str(stream.checkpoint)
    daemon = daemon_factory(
        {"orders": checkpoint},
        name="standalone",
        zookeeper=zk_connect,
        extra_args=["--group", "g", "--node", "a"],
    )
    with daemon.client() as client:
        assert eventually(lambda: {j.job: j.latest_epoch for j in client.jobs()} == {"orders": 0}, 120)
        client.group_jobs.add("orders", checkpoint)
        client.group_jobs.add("orders-again", checkpoint)

        def states() -> dict[str, tuple[str, str]]:
            return {
                job.definition.name: (replica.state, replica.reason)
                for job in client.group_jobs.status().jobs
                for replica in job.replicas
            }

        assert eventually(lambda: states().get("orders-again", ("",))[0] == "following", 120), states()
        state, reason = states()["orders"]
        assert state == "failed" and "outside the group" in reason
        # Pausing the group's job of that name leaves the config job ingesting.
        client.group_jobs.pause("orders")
        assert eventually(lambda: states()["orders"][0] == "failed", 30)  # its reason still shown
        stream.start(fresh=False)
        try:
            stream.feed(orders(1))
        finally:
            stream.stop()
        assert eventually(lambda: {j.job: j.latest_epoch for j in client.jobs()}.get("orders") == 1, 120)
        # Removing the group's job of that name leaves the config job alone too.
        client.group_jobs.remove("orders")
        client.group_jobs.remove("orders-again")
        assert eventually(lambda: {j.job for j in client.jobs()} == {"orders"}, 120)
        assert client.get("orders", "u1", epoch=1).found


@pytest.mark.spark
def test_jobs_add_splits_a_job_into_shards_of_its_spark_partitions(
    tmp_path: Path, orders_checkpoint: Path, zk_connect: str, daemon_factory: Callable[..., DaemonProcess]
) -> None:
    daemon = daemon_factory({}, name="a", zookeeper=zk_connect, extra_args=["--group", "g", "--node", "a"])
    # No --partitions: learned from the checkpoint's state metadata (two partitions).
    added = cli(daemon.target, "jobs", "add", "sharded", str(orders_checkpoint), "--shards", "2", "--json")
    assert added.returncode == 0, added.stderr
    record = json.loads(added.stdout)
    assert (record["shards"], record["partitions"], record["shard_ranges"]) == (
        2,
        2,
        [[0, 0], [1, LAST_PARTITION]],
    )
    stated = cli(
        daemon.target, "jobs", "add", "stated", str(orders_checkpoint), "--shards", "2", "--partitions", "8"
    )
    assert stated.returncode == 0 and "2 shard(s) of 8 partitions: 0-3, 4 and after" in stated.stdout, (
        stated.stderr
    )
    whole = cli(daemon.target, "jobs", "add", "whole", str(orders_checkpoint))
    assert whole.returncode == 0 and "1 shard (every partition)" in whole.stdout, whole.stderr
    # A checkpoint without state metadata yet: the number must be stated.
    empty = tmp_path / "empty"
    empty.mkdir()
    refused = cli(daemon.target, "jobs", "add", "early", str(empty), "--shards", "2")
    assert refused.returncode == 4, refused.stderr
    assert "no state store metadata yet" in refused.stderr and "BAD_REQUEST" in refused.stderr
    # More shards than partitions: refused by the CLI, and by the daemon.
    too_many = cli(
        daemon.target, "jobs", "add", "many", str(orders_checkpoint), "--shards", "3", "--partitions", "2"
    )
    assert too_many.returncode == 4 and "3 shards cannot split 2 partitions" in too_many.stderr
    with daemon.client() as client, pytest.raises(InvalidArgument, match="cannot split"):
        client.group_jobs.add("many", str(orders_checkpoint), shards=3)
    # status shows each shard's range.
    status = cli(daemon.target, "jobs", "status")
    assert status.returncode == 0, status.stderr
    assert "job sharded: 2 shard(s) of 2 partitions: 0, 1 and after" in status.stdout
    assert "job whole: 1 shard (every partition)" in status.stdout

    def ranges() -> dict[str, Any]:
        document = json.loads(cli(daemon.target, "jobs", "status", "--json").stdout)
        return {j["job"]: j["shard_ranges"] for j in document["jobs"]}

    assert eventually(lambda: ranges()["stated"][-1][0] == 1, 60), ranges()
    assert ranges() == {
        "sharded": [[0, 0], [1, LAST_PARTITION]],
        # Stated as 8, but its checkpoint's epochs have 2: a replica caught up asked for 2.
        "stated": [[0, 0], [1, LAST_PARTITION]],
        "whole": [[0, 2147483646]],
    }
