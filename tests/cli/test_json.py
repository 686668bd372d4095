"""``--json``: NDJSON for ``get``, ``scan`` and ``watch``, one document for the rest."""

from __future__ import annotations

import json
import selectors
import subprocess
import sys
from typing import Any

from tests.cli.conftest import ACCOUNTS, KEY_SCHEMA, Served
from tests.cli.invoke import epochstate

READ_FIELDS = {"job", "operator", "store", "epoch", "query_id", "key", "found", "value", "partition"}
EPOCH_FIELDS = {"job", "epoch", "query_id", "committed_at_ms", "ingested_at_ms", "watermark_ms", "sources"}


def json_lines(stdout: str) -> list[dict[str, Any]]:
    """Each line one JSON object, nothing else on stdout."""
    assert stdout.endswith("\n"), stdout
    return [json.loads(line) for line in stdout.splitlines()]


def account(number: int) -> dict[str, str]:
    return {"customer_region_identifier": "eu-west", "customer_account_identifier": f"account-{number}"}


def test_get_prints_one_object_per_key_with_the_epoch_that_answered(served: Served) -> None:
    newest = served.newest()
    keys = (json.dumps(account(1)), '["eu-west", "nobody"]')
    done = epochstate(served.daemon.target, "get", "spend", *keys, "--json")
    assert done.returncode == 0, done.stderr
    found, missing = json_lines(done.stdout)
    assert set(found) == set(missing) == READ_FIELDS
    assert found["epoch"] == missing["epoch"] >= newest
    assert (found["job"], found["operator"], found["store"], found["found"]) == ("spend", 0, "default", True)
    assert found["key"] == account(1)
    assert set(found["value"]) == {"count", "sum"}  # the aggregation's buffer
    assert isinstance(found["partition"], int)
    assert (missing["found"], missing["value"], missing["partition"]) == (False, None, None)
    query_id = json.loads(epochstate(served.daemon.target, "jobs", "--json").stdout)[0]["query_id"]
    assert found["query_id"] == missing["query_id"] == query_id != ""


def test_reads_pinned_to_another_query_fail_naming_both(served: Served) -> None:
    target = served.daemon.target
    query_id = json.loads(epochstate(target, "jobs", "--json").stdout)[0]["query_id"]
    key = json.dumps(account(1))
    pinned = epochstate(target, "get", "spend", key, "--query-id", query_id, "--json")
    assert pinned.returncode == 0, pinned.stderr
    assert json_lines(pinned.stdout)[0]["query_id"] == query_id
    other = "00000000-0000-0000-0000-000000000000"
    for args in (("get", "spend", key), ("scan", "spend")):
        refused = epochstate(target, *args, "--query-id", other, "--json")
        assert refused.returncode == 5, refused.stderr  # FAILED_PRECONDITION
        assert refused.stdout == ""
        assert "[INCARNATION_CHANGED]" in refused.stderr, refused.stderr
        assert other in refused.stderr and query_id in refused.stderr


def test_scan_prints_one_object_per_record_all_at_one_epoch(served: Served) -> None:
    epoch = served.newest()
    done = epochstate(served.daemon.target, "scan", "spend", "--epoch", str(epoch), "--json")
    assert done.returncode == 0, done.stderr
    records = json_lines(done.stdout)
    assert len(records) == ACCOUNTS
    assert all(set(r) == READ_FIELDS and r["epoch"] == epoch and r["found"] for r in records)
    accounts = [r["key"]["customer_account_identifier"] for r in records]
    assert sorted(accounts) == [f"account-{i}" for i in range(ACCOUNTS)]
    limited = epochstate(served.daemon.target, "scan", "spend", "--limit", "1", "--json")
    assert len(json_lines(limited.stdout)) == 1


def test_listings_are_one_document(served: Served) -> None:
    target = served.daemon.target
    for args in (("jobs",), ("describe", "spend"), ("epochs", "spend")):
        done = epochstate(target, *args, "--json")
        assert done.returncode == 0, done.stderr
        assert done.stdout.count("\n") == 1, "piped: one compact line"
        document = json.loads(done.stdout)
        if args == ("jobs",):
            [job] = document
            assert job["job"] == "spend" and job["latest_epoch"] >= 2 and job["problems"] == []
            assert job["held_partitions"] == []  # every partition: not a group replica of some shards
        elif args[0] == "describe":
            assert document["held_partitions"] == []
            [store] = document["stores"]
            assert (store["key"], store["earlier"]) == (KEY_SCHEMA, [])
        else:
            assert all(set(e) == EPOCH_FIELDS for e in document) and len(document) >= 3
            [source] = document[-1]["sources"]
            assert isinstance(source["end"], dict), "Spark's offset JSON, as JSON"


def test_watch_json_count_prints_that_many_lines(served: Served) -> None:
    done = epochstate(served.daemon.target, "watch", "spend", "--after", "0", "--count", "2", "--json")
    assert done.returncode == 0, done.stderr
    first, second = json_lines(done.stdout)
    assert (first["epoch"], second["epoch"]) == (1, 2)
    assert set(first) == EPOCH_FIELDS and first["job"] == "spend"


def test_watch_writes_each_epoch_as_it_comes(served: Served) -> None:
    """Each line reaches a pipe while the command still runs: flushed per line."""
    command = [sys.executable, "-m", "epochstate.cli", "watch", "spend", "--count", "2", "--json"]
    watching = subprocess.Popen(
        [*command, "--target", served.daemon.target],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert watching.stdout is not None
    lines = selectors.DefaultSelector()
    lines.register(watching.stdout, selectors.EVENT_READ)
    try:
        seen = []
        for _ in range(2):
            # The watch starts with the next new epoch; feed until it has one (an epoch
            # committed before the command has subscribed never reaches it: feed again
            # soon rather than wait long for it).
            for _ in range(20):
                epoch = served.feed()
                if lines.select(timeout=1):
                    break
            line = watching.stdout.readline()
            seen.append(json.loads(line)["epoch"])
            assert seen[-1] <= epoch
        assert watching.wait(30) == 0
        assert seen == sorted(seen) and len(set(seen)) == 2
    finally:
        lines.close()
        if watching.poll() is None:
            watching.kill()
        watching.communicate()


HISTORY_FIELDS = {"job", "operator", "store", "query_id", "from_epoch", "to_epoch", "key"} | {
    "valid_from",
    "valid_to",
    "deleted",
    "value",
    "partition",
}
CHANGE_FIELDS = {"job", "operator", "store", "query_id", "epoch", "type", "key", "value", "partition"}


def test_history_and_changes_print_ndjson_that_agree(served: Served) -> None:
    target, newest = served.daemon.target, served.newest()
    done = epochstate(target, "history", "spend", json.dumps(account(1)), "--from", "0", "--json")
    assert done.returncode == 0, done.stderr
    versions = json_lines(done.stdout)
    assert versions and all(set(v) == HISTORY_FIELDS for v in versions)
    assert all((v["key"], v["from_epoch"]) == (account(1), 0) for v in versions)
    assert versions[-1]["valid_to"] is None and versions[-1]["to_epoch"] >= newest
    done = epochstate(target, "changes", "spend", "--from", "0", "--to", str(newest), "--json")
    assert done.returncode == 0, done.stderr
    lines = json_lines(done.stdout)
    markers = [line for line in lines if line["type"] == "epoch_complete"]
    assert [m["epoch"] for m in markers] == list(range(newest + 1))
    assert all(m["committed_at_ms"] > 0 for m in markers)
    changed = [line for line in lines if line["type"] != "epoch_complete"]
    assert all(set(c) == CHANGE_FIELDS and c["type"] in ("upsert", "delete") for c in changed)
    # The key's versions begin exactly at the epochs its changes were made in.
    mine = [c for c in changed if c["key"] == account(1)]
    assert [c["epoch"] for c in mine] == [v["valid_from"] for v in versions]
    assert [c["value"] for c in mine] == [v["value"] for v in versions]
